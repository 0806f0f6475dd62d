"""The watch's parts, in this process: the settings read off a DataLoader with its own batch sampler, the loader
found in a tqdm or a generator, an IterableDataset that does not shard, a framework's DataLoader rebuilt as itself,
the bound's replays, and secrets kept out of the logged command line."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler, TensorDataset

from wif.config import ConfigError
from wif.watcher.found import anchor_of, find_dataloader, settings_of
from wif.watcher.orders import Orders
from wif.watcher.origin import redacted


class Pairs(Dataset):
    def __len__(self) -> int:
        return 100

    def __getitem__(self, i: int):
        return torch.zeros(2), i


class Uneven:
    """A batch sampler of its own, with no batch_size: batches of 10 and 15 alternating (100 items, 8 batches)."""

    def __iter__(self):
        starts = [0, 10, 25, 35, 50, 60, 75, 85, 100]
        for a, b in zip(starts, starts[1:]):
            yield list(range(a, b))

    def __len__(self) -> int:
        return 8


def test_a_batch_samplers_batches_are_priced_at_their_size() -> None:
    """Before, a DataLoader given batch_sampler= reported batch_size None, and wif-advise priced batches of 1."""
    data = Pairs()
    fixed = DataLoader(data, batch_sampler=BatchSampler(SequentialSampler(data), 16, drop_last=False))
    assert settings_of(fixed, fixed)["batch_size"] == 16
    own = DataLoader(data, batch_sampler=Uneven())
    assert settings_of(own, own)["batch_size"] == round(100 / 8)  # the mean batch over an epoch
    assert settings_of(data, DataLoader(data, batch_size=None))["batch_size"] is None  # each item a batch


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.zeros(40, 2))


def test_the_loader_is_found_in_a_tqdm_a_generator_and_lengthless_data_is_capped() -> None:
    loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=2)

    def over(dl: DataLoader):
        yield from dl

    gen = over(loader)
    assert find_dataloader(gen) == (gen, "", loader)  # found, but a generator's local cannot be swapped
    assert anchor_of(gen) is anchor_of(loader) is loader.dataset
    pytest.importorskip("tqdm")
    from tqdm import tqdm

    bar = tqdm(loader, disable=True)
    assert find_dataloader(bar) == (bar, "iterable", loader)
    orders = Orders({"uri": "", "run_id": None, "mode": "train", "batches": 5, "epochs": 2})
    assert orders.length(DataLoader(Stream(), batch_size=4)) == 5  # no len(): the cap is the length


class Items(IterableDataset):
    """40 items; `sharded`: each worker yields its own share, as torch's docs ask of an IterableDataset."""

    def __init__(self, sharded: bool) -> None:
        self.sharded = sharded

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        step, start = (info.num_workers, info.id) if self.sharded and info is not None else (1, 0)
        return iter([torch.tensor([float(i)]) for i in range(start, 40, step)])


@pytest.mark.parametrize("sharded", [False, True])
def test_an_iterable_dataset_that_does_not_shard_is_not_timed_with_workers(sharded: bool) -> None:
    """Moved from 0 to 2 workers, an IterableDataset that ignores get_worker_info() yields every item twice:
    the measurement ends saying so (before: its candidates were timed, and picked, on duplicated data)."""
    loader = DataLoader(Items(sharded), batch_size=4)
    orders = Orders(
        {"uri": "", "run_id": None, "mode": "loader_only", "batches": 6, "epochs": 1, "loader": {"num_workers": 2}}
    )
    orders.take(loader, find_dataloader(loader))
    if sharded:  # not cut: a stream without a length runs on, window after window (NOTE [ Windows ])
        got = sorted(float(v) for batch in orders.batches(loader, 0) for v in batch.flatten())
        assert got == [float(i) for i in range(40)]
        return
    with pytest.raises(SystemExit, match="Items does not split its items among DataLoader workers"):
        list(orders.batches(loader, 0))


class Placed(DataLoader):
    """A framework's own DataLoader, as accelerate's DataLoaderShard: state of its own, batches it changes."""

    def __init__(self, *args, device: str = "cpu", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.device = device

    def __iter__(self):
        for batch in super().__iter__():
            yield self.device, batch


def test_a_frameworks_dataloader_is_rebuilt_as_itself() -> None:
    """Before, the rebuilt loader was a plain DataLoader: accelerate's batches lost their device placement and
    the race's runs crashed where the loader-only trials passed."""
    from wif.watcher.found import rebuild

    loader = Placed(TensorDataset(torch.arange(8.0)), batch_size=2, device="cuda:7")
    again = rebuild(loader, {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 4})
    assert type(again) is Placed and again.device == "cuda:7" and again.dataset is loader.dataset
    assert (again.num_workers, again.persistent_workers, again.prefetch_factor) == (2, True, 4)
    got = list(again)
    assert [device for device, _ in got] == ["cuda:7"] * 4
    assert sorted(float(v) for _, (x,) in got for v in x) == [float(i) for i in range(8)]
    assert loader.num_workers == 0 and not loader.persistent_workers  # the script's own, untouched


def test_the_bound_hands_each_replay_its_own_batch() -> None:
    """A step that normalizes its batch in place, or pops a key, sees the same batch at every replay (before,
    the replay handed it the objects the step had changed)."""
    from wif.watcher.replay import Keep, Replay

    kept: list = []
    (first,) = list(Keep([{"x": torch.ones(2), "y": torch.zeros(2)}], kept, window=8, count=1))
    first["x"].mul_(0)  # the step of the first epoch normalizes in place
    for _ in range(3):
        (batch,) = list(Replay(kept, 1))
        assert batch["x"].tolist() == [1.0, 1.0] and "y" in batch
        batch.pop("y")  # the step pops a key


def test_the_bound_of_one_long_epoch_replays_after_its_first_window() -> None:
    """A script of one epoch, or an endless stream, has no second epoch to replay: the bound reads its first
    window from the loader and replays the kept batches for the rest of the epoch (before: it read them all)."""
    from wif.watcher.replay import Keep

    read = []
    source = (read.append(i) or torch.tensor([float(i)]) for i in range(100))
    kept: list = []
    got = [float(b) for b in itertools.islice(Keep(source, kept, window=3, count=None), 10)]
    assert read == [0, 1, 2] and got == [0.0, 1.0, 2.0] * 3 + [0.0]
    short: list = []  # an epoch that ends within its first window: nothing replayed after it
    assert [float(b) for b in Keep([torch.tensor([5.0])], short, window=3, count=None)] == [5.0]


def test_secrets_in_the_command_line_are_not_logged() -> None:
    argv = ["train.py", "--hf-token", "abc", "--api_key=xyz", "WANDB_API_KEY=k", "--lr", "0.1", "--tokenizer=t5"]
    assert redacted(argv) == [
        "train.py",
        "--hf-token",
        "***",
        "--api_key=***",
        "WANDB_API_KEY=***",
        "--lr",
        "0.1",
        "--tokenizer=t5",
    ]


def test_a_silent_tracking_server_is_asked_once_a_process() -> None:
    """A loop that makes its dataset anew each epoch opens a store each epoch: a server that gave no answer is not
    waited for again. A server that answers passes, an error status too, but not one MLflow's client retries."""
    import http.server
    import threading
    from urllib.parse import urlparse

    from tests.servers import busy_server, silent_uri
    from wif.measure.tracking import check_server_answers

    uri = silent_uri()
    with pytest.raises(ConfigError, match="gave no answer within 5 s"):
        check_server_answers(uri, within_s=5.0)  # nothing listens there
    with busy_server(health=503) as unavailable:  # a proxy in front of a server that is down
        with pytest.raises(ConfigError, match="answered HTTP 503"):
            check_server_answers(unavailable)
    server = http.server.HTTPServer(("127.0.0.1", urlparse(uri).port), http.server.BaseHTTPRequestHandler)  # 501
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        check_server_answers(f"{uri}/")  # another URI: asked, and an error status is an answer
        with pytest.raises(ConfigError, match="gave no answer"):
            check_server_answers(uri)  # not asked again
    finally:
        server.shutdown()
        server.server_close()
