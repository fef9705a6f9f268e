"""python3 -m kvfs_bench: the kvfs-bench command."""
import sys

from kvfs_bench.cli import main

sys.exit(main())
