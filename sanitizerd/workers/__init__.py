"""Sessions over worker processes (``sanitizerd serve --workers N``): a listener process that accepts and shakes
hands, and workers that each run a Hub of their own, fed connections over a Unix socketpair (SCM_RIGHTS)."""
