"""Where a run's batches come from. Imports `wif.config` and `wif.measure`.

    `synthetic`: the generated and encoded sets, and their cache; `custom`: the user's own Dataset.
    `folder`: image folders, and image i of a set; `folder_check`: the folders' one-time check.
    `datasets`: datasets and splits; `loaders`: the loader options as iterables of batches.
    `transfer`: the copy to the device; `decode`: decoding on the device.
    `formats/`: storage formats; `engines/`: pipeline engines.

Nothing is imported here: a worker unpickling a dataset imports only the module that defines it.
"""
