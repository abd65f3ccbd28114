"""`python -m edgeformer.train ...` = `edgeformer train ...`; for multi-GPU:
`torchrun --nproc_per_node 4 -m edgeformer.train --preset multi30k-en-de --device cuda`."""

import sys

from edgeformer.core.commandline import log_level, run_command, setup_logging
from edgeformer.core.flags import Parser
from edgeformer.train import cli

level, argv = log_level(sys.argv[1:])
parser = Parser(prog="python -m edgeformer.train")
cli.add_arguments(parser, "train")
args = parser.parse_args(argv)
setup_logging(level, "train")
sys.exit(run_command("train", cli.run, args))
