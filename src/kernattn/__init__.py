"""kernattn: the kernel view of attention, reproduced and measured."""

__version__ = "0.1.0"
