"""`python -m rig.fdt`: the same as the `rig-fdt` console script."""
from rig.fdt.cli import main

raise SystemExit(main())
