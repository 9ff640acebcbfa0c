"""``python -m transfer.compare REPORT.jsonl...``: the first rank and operation to diverge in a job."""
import sys

from .report import main

sys.exit(main())
