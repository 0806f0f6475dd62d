"""Who is Faster: `python train.py -m 'loader=glob(*)' data.fraction=0.1,0.4,0.7` runs the whole study.

The checkout's entry to `wif-study` (wif.sweep.study): the same command line, the same main. Spawned
DataLoader workers and DDP ranks import this file again as their main module: it imports nothing more.
"""

from wif.sweep.study import run

if __name__ == "__main__":
    run()
