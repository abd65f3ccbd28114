"""`python -m edgeformer.train ...` = `edgeformer train ...`; for multi-GPU:
`torchrun --nproc_per_node 4 -m edgeformer.train --preset multi30k-en-de --device cuda`."""

import sys

from edgeformer.runtime.cli import main

sys.exit(main(["train", *sys.argv[1:]]))
