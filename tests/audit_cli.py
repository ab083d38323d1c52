"""``python tests/audit_cli.py ARGS``: gpuscale's real command line (``gpuscale.cli.main``) with
the test-only ``audittest`` backend family and ``audit_mixed`` workload registered first
(tests/auditfam.py), so the CLI tests can run a deliberately mixed workload in a subprocess."""

import sys

import auditfam

if __name__ == "__main__":  # spawned worker processes import this file again as __mp_main__
    auditfam.register()
    from gpuscale.cli import main

    main(sys.argv[1:])
