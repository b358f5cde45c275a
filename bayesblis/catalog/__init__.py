"""Built-in GPU datasheets and model presets (public facts), and their loaders."""

from bayesblis.catalog.gpus import GpuSpec, list_gpus, load_gpu
from bayesblis.catalog.models import ModelArch, list_models, load_model

__all__ = ["GpuSpec", "ModelArch", "list_gpus", "list_models", "load_gpu", "load_model"]
