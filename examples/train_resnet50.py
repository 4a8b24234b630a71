"""Train torchvision's ResNet-50 on random images (no download, random weights).

A plain training script, as a user would write it; it knows nothing about kview:
    kview capture --annotate --skip 3 --steps 2 -o resnet50.sqlite -- python examples/train_resnet50.py
"""
import argparse
import json
import time

import torch
import torchvision

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--size", type=int, default=224, help="image side in pixels")
p.add_argument("--model", default="resnet50", help="any torchvision classification model name")
args = p.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torchvision.models.get_model(args.model, weights=None).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
criterion = torch.nn.CrossEntropyLoss()
images = torch.randn(args.batch, 3, args.size, args.size, device=device)
labels = torch.randint(0, 1000, (args.batch,), device=device)

times = []
for step in range(args.steps):
    t0 = time.perf_counter()
    loss = criterion(model(images), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
print(json.dumps({"script": "train_resnet50", "model": args.model, "batch": args.batch, "device": device,
                  "step_times_s": [round(t, 6) for t in times], "loss": loss.item()}))
