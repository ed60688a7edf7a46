# %% [markdown]
# # labeldist from Python: `import labeldist as ld`
#
# A notebook in percent format (Jupyter, VS Code and jupytext open it as cells; `python examples/python_face.py`
# runs it whole). It builds two stores, opens one again, reads its neighbours, its table and its arrays, and trains
# a small embedding on its minibatches with pytorch-metric-learning. The tests run it (tests/project/test_examples.py)
# and check that its stores equal the command line's.
#
#     python examples/python_face.py --poses data/mpii/mpii_valid_2958.csv --out stores-example

# %%
import argparse
from pathlib import Path

import numpy as np
import torch
from pytorch_metric_learning.losses import TripletMarginLoss

import labeldist as ld


def main(poses_file: str, out: Path) -> None:
    # %% [markdown]
    # ## A store from a NumPy array
    # Any vectors: item `i` is id `"i"`; the distance is a SciPy metric (`metric=`). Dask runs the blocks (a
    # LocalCluster of one worker per core; `workers=`, `cluster="slurm"` or `scheduler=` to run elsewhere).

    # %%
    points = np.random.default_rng(0).normal(size=(500, 8))
    vectors = ld.precompute("vectors", points, out / "points", k=10, dataset="points", metric="euclidean")
    print(vectors, len(vectors), "items")

    # %% [markdown]
    # ## A store from a label file
    # The kind's reader reads it, with the options `labeldist precompute pose` has, named without dashes.

    # %%
    poses = ld.precompute("pose", poses_file, out / "mpii-pose", k=20, normalization="center_scale")

    # %% [markdown]
    # ## Open it again, and ask it
    # `ld.open` takes a folder, or a service's URL (`http://127.0.0.1:8000/v1/stores/mpii-pose`): the same Store.

    # %%
    store = ld.open(out / "mpii-pose")
    assert len(store) == len(poses)
    nearest = store.neighbors(0, k=5)
    print("item", store.ids[0], "-> nearest", nearest.indices.tolist(), nearest.distances.round(3).tolist())
    table = store.to_pandas()  # labeldist export's columns: item_index, item_id, rank, neighbor_index, ...
    print(table.head(3))
    arrays = store.to_xarray()  # lazily read: indices and distances on (item, rank), the dense matrix
    print(dict(arrays.sizes))

    # %% [markdown]
    # ## Train on its minibatches
    # Each minibatch: an anchor, its 5 nearest in label space, random others, and their label distances
    # (Kim et al., CVPR 2019). The embedding here is a linear map of the poses' own joints; any model fits.

    # %%
    torch.set_num_threads(1)  # a small model on a CPU: torch's default threads can make each step far slower
    torch.manual_seed(0)
    joints = torch.as_tensor(store.labels.xy.reshape(len(store), -1), dtype=torch.float32)
    model = torch.nn.Linear(joints.shape[1], 16)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = TripletMarginLoss(margin=0.1)
    for step in range(20):
        batch = store.batches(count=4, size=30, neighbors=5, seed=step)
        embeddings = model(joints[torch.as_tensor(batch.indices).reshape(-1)])
        loss = loss_fn(embeddings, ld.pml_labels(batch, positives=5), indices_tuple=ld.pml_triplets(batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 5 == 0:
            print(f"step {step}: loss {loss.item():.4f}")


# Dask starts its workers by importing this file again: the work runs under the main guard
if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--poses", default="data/mpii/mpii_valid_2958.csv", help="an MPII CSV")
    parser.add_argument("--out", type=Path, default=Path("stores-example"), help="folder of the two stores")
    args = parser.parse_args()
    main(args.poses, args.out)
