"""GKA on vision (gka-paper sections 4 and 7): DeiT-style ViTs from timm with the attention
variant taken from the registry (softmax = DeiT, gka = GKA, valueless = VLT).

    params.py   the `vision:` section of params.yaml
    data.py     Fashion-MNIST (idx files), CIFAR-10/100, ImageNet-1k (ImageFolder); `prepare-vision`
    models.py   timm VisionTransformer with our attention plugged into every block
    counts.py   Tables 2/3/5: parameters, sigma counts, FLOPs (FlopCounterMode), checkpoint size
    train.py    the DeiT recipe (`train-vision`): AdamW, warmup + cosine, Mixup/CutMix, EMA ...
    rollout.py  attention rollout (Abnar & Zuidema) with discard ratios
    viz.py      hooks on the real modules and the section 7 figures (`analyze-vision`)
    stages.py   the vision part of the DAG (the Snakefile's rules and dvc.yaml are made from them)

Nothing heavy is imported here; the `vision:` section itself lives in kernattn.config.vision.
"""
