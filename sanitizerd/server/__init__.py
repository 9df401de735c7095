"""Every connection's I/O, from either front door to a producer session or a control pump.

``accept``: the one accept loop (with its backoff) and the one peer-credential reader; ``admission``: the connection
limits; ``doors``: where a hello (our protocol's, or the implicit one a msSanitizer-wire connection stands for)
becomes a session; ``compat_socket``: the per-job sockets in msSanitizer's form. This floor imports ``sessions`` and
``compat`` and is imported by ``daemon`` and ``workers``, never the other way round.
"""
