"""edgeformer.core: what every layer shares, torch-free (numpy only).

config.py             ModelConfig: the model's hyperparameters, validated
decoding.py           GenerationOptions and the decoding algorithms over a Stepper
format.py             the package format's names and versions (file names, graph IO names)
schema.py             config.json read into a typed PackageConfig; PackageError
variants.py           which variant `variant="auto"` picks, and the quality bounds
generation_config.py  Hugging Face's generation_config.json <-> GenerationOptions
files.py              checksums and safe writes
"""
