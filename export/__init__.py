"""edgeformer.export"""
