"""A synthetic 10-class task generated in code (no downloads).

Every class is a mixture of two Gaussian clusters in 20 dimensions, with unit noise around
centres drawn once from a fixed generator. The clusters overlap, so even a perfect model stays
around 90%: the task is learnable but not trivial, and how well the optimiser does shows in the
accuracy.

The data depend only on `data_seed` (a private torch.Generator), never on the global RNG: every
run sees the same training and test sets, and `--seed` changes only initialisation and shuffling.
"""

import torch
from torch.utils.data import Dataset

NUM_FEATURES = 20
NUM_CLASSES = 10
MODES_PER_CLASS = 2


class ClusterDataset(Dataset):
    def __init__(self, features, labels):
        self.features = features
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return self.features[idx], self.labels[idx]


def make_datasets(n_train=20480, n_test=4000, data_seed=1234, separation=0.85):
    gen = torch.Generator().manual_seed(data_seed)
    n_modes = NUM_CLASSES * MODES_PER_CLASS
    centres = separation * torch.randn(n_modes, NUM_FEATURES, generator=gen)

    def draw(n):
        mode = torch.randint(0, n_modes, (n,), generator=gen)
        features = centres[mode] + torch.randn(n, NUM_FEATURES, generator=gen)
        return ClusterDataset(features, mode % NUM_CLASSES)

    return draw(n_train), draw(n_test)
