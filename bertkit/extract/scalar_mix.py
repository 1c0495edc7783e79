"""ELMo's scalar mix (Peters et al. 2018, eq. 1): gamma * sum_k softmax(w)_k * h_k, learned with the task.

Example:
```python
>>> mix = ScalarMix(3)
>>> mix(torch.ones(5, 3, 8)).shape        # [words, layers, H] → [words, H]
torch.Size([5, 8])
```
"""

from __future__ import annotations

import torch
from torch import nn


class ScalarMix(nn.Module):
    def __init__(self, num_layers: int):
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))  # softmax(0) = uniform: starts as the mean
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: torch.Tensor) -> torch.Tensor:
        """layers: [..., num_layers, H] → [..., H]."""
        w = torch.softmax(self.weights, dim=0)  # [num_layers]
        return self.gamma * torch.einsum("...lh,l->...h", layers, w)

    def normalized_weights(self) -> list[float]:
        return torch.softmax(self.weights.detach(), 0).tolist()
