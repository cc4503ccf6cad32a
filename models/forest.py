"""Compiled-free fast inference of a LightGBM model — the regressor or the LambdaRank ranker of an
artifact: all trees as flat numpy arrays, traversed together, one level per step, for all candidate
rows at once.

LightGBM's numerical split sends a row left when ``x <= threshold`` (``decision_type "<="``); the
raw score is the sum over trees of the reached leaf values (for a regressor the first tree carries
the boost-from-average offset; a ranker's raw score is its ranking score: neither objective
transforms it). For finite inputs and splits with ``missing_type`` ``None`` or ``NaN`` this is
exactly what ``Booster.predict`` computes (tested to 1e-12); models with categorical splits or
``Zero`` missing handling are refused at load (training never makes them).

Layout: nodes of every tree in one array; a leaf is a node whose feature is 0, threshold +inf and
both children itself, so ``depth`` unmasked steps of ``node = x[feature[node]] <= threshold[node]
? left[node] : right[node]`` reach every leaf.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


class ForestError(ValueError):
    pass


@dataclass(frozen=True)
class Forest:
    feature: np.ndarray    # int64, per node (column of the model's own feature order)
    threshold: np.ndarray  # float64, per node (+inf for leaves)
    left: np.ndarray       # int64, per node
    right: np.ndarray      # int64, per node
    value: np.ndarray      # float64, per node (leaf value; 0 for splits)
    roots: np.ndarray      # int64, per tree
    depth: int
    num_features: int
    children: np.ndarray = None  # int64, [2·node] = left, [2·node + 1] = right (one gather per level)

    def __post_init__(self) -> None:
        if self.children is None:
            object.__setattr__(self, "children", np.stack([self.left, self.right], axis=1).ravel())

    @classmethod
    def from_dump(cls, dump: dict[str, Any]) -> Forest:
        """From ``Booster.dump_model()``."""
        feature: list[int] = []
        threshold: list[float] = []
        left: list[int] = []
        right: list[int] = []
        value: list[float] = []
        roots: list[int] = []
        depth = 0

        def add(node: dict[str, Any], level: int) -> int:
            nonlocal depth
            index = len(feature)
            feature.append(0)
            threshold.append(np.inf)
            left.append(index)
            right.append(index)
            value.append(0.0)
            if "leaf_value" in node:
                value[index] = float(node["leaf_value"])
                depth = max(depth, level)
                return index
            if node.get("decision_type") != "<=":
                raise ForestError(f"unsupported split decision {node.get('decision_type')!r} (categorical?)")
            if node.get("missing_type") not in ("None", "NaN"):
                raise ForestError(f"unsupported missing_type {node.get('missing_type')!r}")
            feature[index] = int(node["split_feature"])
            threshold[index] = float(node["threshold"])
            left[index] = add(node["left_child"], level + 1)
            right[index] = add(node["right_child"], level + 1)
            return index

        for tree in dump["tree_info"]:
            roots.append(add(tree["tree_structure"], 0))
        return cls(np.asarray(feature, dtype=np.int64), np.asarray(threshold, dtype=np.float64),
                   np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64),
                   np.asarray(value, dtype=np.float64), np.asarray(roots, dtype=np.int64), depth,
                   int(dump.get("max_feature_idx", -1)) + 1)

    @property
    def num_trees(self) -> int:
        return len(self.roots)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Raw score per row of ``x`` (rows × the model's features, float64, finite)."""
        n = x.shape[0]
        if n == 0:
            return np.empty(0)
        flat = np.ascontiguousarray(x, dtype=np.float64).ravel()
        base = (np.arange(n, dtype=np.int64) * x.shape[1])[:, None]
        node = np.broadcast_to(self.roots, (n, self.num_trees)).copy()
        feature, threshold, children = self.feature, self.threshold, self.children
        for _ in range(self.depth):
            column = feature.take(node)
            column += base
            # x > threshold is "not x <= threshold" for finite x: the right child sits at 2·node + 1.
            go_right = flat.take(column) > threshold.take(node)
            node *= 2
            node += go_right
            node = children.take(node)
        return self.value.take(node).sum(axis=1)
