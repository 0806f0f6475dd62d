"""Storage formats for images decoded per sample (data.format=folder|lmdb|shards, docs/formats.md): what a
pack is made from (source), what every pack shares (pack: pack.json, the index and its checks), LMDB
(lmdb_format) and WebDataset-layout tar shards (shards), packs in the cache (store), a pack checked record by
record before a run uses it (check), and a run's splits read from a format, with the cold page cache around
each epoch (splits).
"""
