"""Storage formats for images decoded per sample (data.format=folder|lmdb|shards, docs/formats.md).

`source`: what a pack is made from.
`pack`: what every pack shares: pack.json, the index and its checks.
`lmdb_format`: LMDB.
`shards`: tar shards in the WebDataset layout.
`store`: packs in the cache, each checked record by record before a run uses it.
`splits`: a run's splits read from a format, with the cold page cache around each epoch.
"""
