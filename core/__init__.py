"""edgeformer.core: what every layer shares, torch-free (numpy only).

config.py             ModelConfig: the model's hyperparameters, validated
decoding.py           GenerationOptions and the decoding algorithms over a Stepper
format.py             the package format's names and versions (file names, graph IO names)
schema.py             config.json read into a typed PackageConfig; PackageError
variants.py           which variant `variant="auto"` picks, and the quality bounds
generation_config.py  Hugging Face's generation_config.json <-> GenerationOptions
data.py               the bundled data sets (Multi30k, Tiny Shakespeare) and TrainingData, the
                      typed record of what a checkpoint was trained on
metrics.py            BLEU and perplexity windows: one path for training, export and bench
files.py              checksums and safe writes
patterns.py           the bound on tokenizer.json regexes (every runtime applies it)
flags.py              command-line flags derived from documented dataclass fields
progress.py           progress of long steps: a bar on a terminal, a line every 30 s in a log
"""
