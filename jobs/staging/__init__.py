"""Staging: the dataset copied into job storage, checked, counted, described and cut into shards."""
