"""edgeformer.train: data, tokenizers, training loops and evaluation.

config.py     TrainConfig and PRESETS          data.py       bundled Multi30k / Shakespeare
tokenizer.py  BPE and char tokenizers          trainer.py    train(cfg) -> model
evaluate.py   evaluate_translation / _lm       cli.py        `edgeformer train`
"""
