"""msSanitizer's packets: one hook connection's stream of packets, framed and answered (``connection``), and which
wire each measured msSanitizer release speaks (``releases``).

Above ``records``: a kernel's record buffer is handed to ``sanitizerd.compat.records.slots``.
"""
