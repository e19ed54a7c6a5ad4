"""Data sets: the catalogue (what every scale reads, from where, with which sha256) and how a
file is found (a mirror folder, the cache, or a verified download). See catalogue.yaml."""

from .catalogue import DataFile, Dataset, Need, dataset, needed
from .locate import BASE_URL_ENV, HOME_ENV, MIRROR_ENV, Where, locate, locate_folder, status

__all__ = ["DataFile", "Dataset", "Need", "dataset", "needed", "Where", "locate", "locate_folder", "status",
           "MIRROR_ENV", "HOME_ENV", "BASE_URL_ENV"]
