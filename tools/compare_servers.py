"""Send the same well-formed requests to two labeldist servers over the same stores, and compare the answers byte
for byte: a change that must not alter any answer (a refactor, a new guard) is checked against the version
before it.

    python tools/compare_servers.py OLD_PORT NEW_PORT      # both on 127.0.0.1, serving the same stores folder

For every store the new server lists: 30 random items, each asked for its neighbours (all, and k = 5), its label,
distances to 20 items and of 10 pairs (computed on demand where not stored), a pairwise batch and an .npz batch;
then the store's entry; 5 items' own labels searched for (with and without the hits' labels); and 12 requests it
must refuse (minibatches that do not fit the store or its pool, items it does not have, a label its kind cannot
read), whose errors must be the same bytes too. Prints how many answers are identical, and the first that differ.
"""

import sys

import httpx
import numpy as np

old, new = int(sys.argv[1]), int(sys.argv[2])
names = [s["name"] for s in httpx.get(f"http://127.0.0.1:{new}/v1/stores").json()["stores"]]
reqs = []
rng = np.random.default_rng(0)
for name in names:
    info = httpx.get(f"http://127.0.0.1:{new}/v1/stores/{name}").json()
    n, k = info["n_items"], info["k"]
    for i in rng.choice(n, 30, replace=False).tolist():
        reqs.append(("GET", f"/v1/stores/{name}/items/{i}/neighbors", None, {}))
        reqs.append(("GET", f"/v1/stores/{name}/items/{i}/neighbors?k={min(5, k)}", None, {}))
        reqs.append(("GET", f"/v1/stores/{name}/items/{i}/label", None, {}))
        reqs.append(("POST", f"/v1/stores/{name}/distances", {"anchor": i, "items": rng.choice(n, 20).tolist()}, {}))
        reqs.append(("POST", f"/v1/stores/{name}/distances", {"pairs": rng.choice(n, (10, 2)).tolist()}, {}))
        reqs.append(
            (
                "POST",
                f"/v1/stores/{name}/batches",
                {"anchors": [i], "size": 12, "neighbors": 4, "pairwise": True, "seed": i},
                {},
            )
        )
        reqs.append(
            ("POST", f"/v1/stores/{name}/batches?format=npz", {"count": 2, "size": 10, "neighbors": 3, "seed": i}, {})
        )
    reqs.append(("GET", f"/v1/stores/{name}", None, {}))
    # search by label: each of 5 items' own label (its JSON form, from the neighbours route), with and without
    # the hits' labels; a kind whose labels have no JSON form answers 422 on both servers, compared as well
    for i in rng.choice(n, 5, replace=False).tolist():
        path = f"/v1/stores/{name}/items/{i}/neighbors?k={min(3, k)}&include_labels=true"
        reqs.append(("GET", path, None, {}))
        answer = httpx.get(f"http://127.0.0.1:{new}{path}", timeout=120)
        if answer.status_code == 200:
            label = answer.json()["label"]
            reqs.append(("POST", f"/v1/stores/{name}/search", {"label": label, "k": 5}, {}))
            reqs.append(("POST", f"/v1/stores/{name}/search", {"label": label, "k": 5, "include_labels": True}, {}))
    # requests each server must refuse, in the same words: what the minibatch steps, the store and the search refuse
    batches = f"/v1/stores/{name}/batches"
    for body in (
        {"anchors": [0], "size": 12, "neighbors": k + 1},  # more neighbours than the store's k
        {"anchors": [0], "size": n + 1},  # a batch larger than the store
        {"anchors": [n], "size": 2},  # no such item: 404
        {"count": 2, "size": 4, "pool": [0, 1, 2]},  # a pool smaller than a batch
        {"anchors": [n - 1], "size": 2, "pool": [0, 1]},  # an anchor outside the pool
        {"anchors": [0], "size": 2, "exclude": [0]},  # an excluded anchor
        {"count": 2, "size": 2, "pool": [0, 1], "exclude": [2]},  # both
        {"count": 2, "size": 2, "pool": [0, n]},  # a pool naming no item
        {"count": 2, "size": 2, "seed": -1},  # the schema's bounds
    ):
        reqs.append(("POST", batches, body, {}))
    reqs.append(("GET", f"/v1/stores/{name}/items/{n}/neighbors", None, {}))
    reqs.append(("POST", f"/v1/stores/{name}/distances", {"anchor": 0, "items": [1, n]}, {}))
    reqs.append(("POST", f"/v1/stores/{name}/search", {"label": {"not": "a label"}, "k": 3}, {}))
reqs.append(("POST", "/v1/stores/no-such-store/batches", {"count": 2, "size": 4}, {}))
same = differ = 0
diffs = []
for method, path, body, _headers in reqs:
    a = httpx.request(method, f"http://127.0.0.1:{old}{path}", json=body, timeout=120)
    b = httpx.request(method, f"http://127.0.0.1:{new}{path}", json=body, timeout=120)
    if a.status_code == b.status_code and a.content == b.content:
        same += 1
    else:
        differ += 1
        diffs.append((path, a.status_code, b.status_code, a.content[:150], b.content[:150]))
print(f"{len(reqs)} requests (answered and refused) over {len(names)} stores: {same} byte-identical, {differ} differ")
for d in diffs[:10]:
    print(d)
