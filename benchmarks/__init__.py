"""edgeformer.benchmarks"""
