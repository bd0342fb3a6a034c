import torch.nn as nn

from data import NUM_CLASSES, NUM_FEATURES


class Net(nn.Module):
    """A small MLP classifier."""

    def __init__(self, in_features=NUM_FEATURES, hidden=64, num_classes=NUM_CLASSES):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        return self.layers(x)
