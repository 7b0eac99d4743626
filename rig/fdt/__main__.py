"""`python -m rig.fdt`: the same as the `rig-fdt` console script."""
from .cli import main

raise SystemExit(main())
