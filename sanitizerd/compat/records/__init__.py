"""msSanitizer's records, decoded: the record types and their numbering per release (``types``, ``numbering``), the
walk over a block's record slots (``slots``) and the converters from records to sanitizerd's events (``convert``).

Below ``packets``: nothing here knows about connections or packets, only the layouts (``sanitizerd.compat.wire``).
"""
