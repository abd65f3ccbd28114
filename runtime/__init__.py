"""The edge runtime: runs a model package with numpy, onnxruntime and tokenizers only."""
