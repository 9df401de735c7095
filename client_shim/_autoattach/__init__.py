"""The directory `sanitizerd run` puts on PYTHONPATH; its sitecustomize attaches (client_shim.attach)."""
