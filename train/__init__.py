"""edgeformer.train"""
