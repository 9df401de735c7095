"""Start-up hook ``sanitizerd run`` puts on PYTHONPATH: attach to sanitizerd, then run the environment's own
sitecustomize (if there is one further down the path), which this module would otherwise hide."""

import importlib.machinery
import importlib.util
import os
import sys

if os.environ.get("SANITIZERD_ATTACH") == "1":
    try:
        from client_shim.attach import attach

        attach()
    except Exception as exc:
        print(f"[sanitizerd] WARNING: cannot attach to sanitizerd ({exc!r}); this process runs unchecked.",
              file=sys.stderr)  # fmt: skip


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
