"""edgeformer.train: data, tokenizers, training loops and evaluation.

config.py     TrainConfig and PRESETS          trainer.py    train(cfg) -> model: the loops
tokenizer.py  BPE and char tokenizers          batches.py    token-count batches, LM windows
evaluate.py   evaluate_translation / _lm       loss.py       smoothed / distillation loss
cli.py        `edgeformer train`               state.py      optimizer, schedule, train state
distill.py    a teacher's translations         run_folder.py OUT, its lock, checkpoints
teacher.py    what a teacher gives a student
"""
