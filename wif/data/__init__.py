"""Where a run's batches come from: the generated and encoded sets and their cache (synthetic), image
folders and their one-time check (folder, folder_check), the user's own Dataset (custom), datasets and
splits (datasets), the loader options as iterables of batches (loaders), the copy to the device (transfer),
decoding on the device (decode), storage formats (formats/) and pipeline engines (engines/).

Imports `wif.config` and `wif.measure`. Nothing is imported here: a worker unpickling a dataset imports
only the module that defines it.
"""
