"""PyTorch's NCCL Flight Recorder: its dumps (pickle or JSON) and `torchfrtrace`'s printed analysis."""
