"""Jobs: the dataset pass from submission to output, its shards, and the GPUs it holds."""
