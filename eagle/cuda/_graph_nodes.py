"""The nodes of CUDA graphs, as a rebind reads and sets them: walk, order, get, set.

Thin helpers over the runtime's and driver's graph-node calls, used by
:mod:`eagle.cuda._rebind`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

from eagle.cuda._runtime import CudaError, cudadrv, cudart, driver
from eagle.errors import EagleValueError

__all__ = [
    "chain",
    "copy_params",
    "deps",
    "driver_handles",
    "edges",
    "kernel_arguments",
    "kernel_params",
    "kind",
    "launch_shape",
    "memset_params",
    "node_params",
    "nodes",
    "set_kernel",
    "set_memset",
    "span",
]


def nodes(graph: Any) -> list[Any]:
    _, count = cudart.cudaGraphGetNodes(graph, 0)
    if not count:
        return []
    nodes, _ = cudart.cudaGraphGetNodes(graph, count)
    return list(nodes)[:count]


def deps(node: Any) -> list[Any]:
    *_, count = cudart.cudaGraphNodeGetDependencies(node, 0)
    if not count:
        return []
    deps, *_ = cudart.cudaGraphNodeGetDependencies(node, count)
    return list(deps)[:count]


def edges(graph: Any) -> tuple[dict[int, Any], dict[int, list[Any]]]:
    """The nodes of ``graph`` by handle value, and the nodes each depends on: three calls
    for the whole graph, where :func:`deps` is two per node."""
    found = {int(node): node for node in nodes(graph)}
    before_of: dict[int, list[Any]] = {key: [] for key in found}
    *_, count = cudart.cudaGraphGetEdges(graph, 0)
    if count:
        sources, targets, *_ = cudart.cudaGraphGetEdges(graph, count)
        for source, target in zip(list(sources)[:count], list(targets)[:count], strict=True):
            before_of[int(target)].append(source)
    return found, before_of


def kind(node: Any) -> str:
    node_type = cudart.cudaGraphNodeGetType(node)
    return str(node_type.name).removeprefix("cudaGraphNodeType").lower()


def chain(nodes: Mapping[int, Any], before_of: Mapping[int, list[Any]]) -> list[Any] | None:
    """``nodes`` in dependency order, or None when that order is not unique."""
    waiting = {key: 0 for key in nodes}
    after: dict[int, list[int]] = {key: [] for key in nodes}
    for key in nodes:
        for dep in before_of[key]:
            if int(dep) in nodes:
                waiting[key] += 1
                after[int(dep)].append(key)
    ready = [key for key, count in waiting.items() if not count]
    order: list[Any] = []
    while len(ready) == 1:
        key = ready.pop()
        order.append(nodes[key])
        for later in after[key]:
            waiting[later] -= 1
            if not waiting[later]:
                ready.append(later)
    return order if len(order) == len(nodes) else None


def span(after: list[Any], before: list[Any]) -> tuple[dict[int, Any], dict[int, list[Any]]]:
    """The nodes reached from ``after`` back to (not including) ``before``, with their
    dependencies."""
    stop = {int(node) for node in before}
    found: dict[int, Any] = {}
    before_of: dict[int, list[Any]] = {}
    frontier = list(after)
    while frontier:
        node = frontier.pop()
        key = int(node)
        if key in stop or key in found:
            continue
        found[key] = node
        before_of[key] = deps(node)
        frontier.extend(before_of[key])
    return found, before_of


def kernel_params(node: Any) -> Any:
    return cudadrv.cuGraphKernelNodeGetParams(driver().CUgraphNode(int(node)))


def kernel_arguments(params: Any) -> list[bytes] | None:
    """The bytes of each argument a kernel node's ``params`` (from :func:`kernel_params`)
    hold, or None when they hold none as a list of arguments (an ``extra`` buffer)."""
    address = int(params.kernelParams or 0)
    if not address:
        return None
    function = params.func
    if not int(function):  # a library's kernel, given by its handle alone
        function = cudadrv.cuKernelGetFunction(params.kern)
    sizes: list[int] = []
    while True:  # by index, until the driver says there is no such argument
        try:
            sizes.append(int(cudadrv.cuFuncGetParamInfo(function, len(sizes))[1]))
        except CudaError as error:
            if error.status != "CUDA_ERROR_INVALID_VALUE":
                raise
            break
    count = len(sizes)
    pointers = (ctypes.c_void_p * count).from_address(address)
    return [ctypes.string_at(int(pointers[index] or 0), size) for index, size in enumerate(sizes)]


def launch_shape(params: Any) -> tuple[int, ...]:
    """What a kernel node's ``params`` launch, besides their arguments: grid, block and
    dynamic shared memory."""
    return (
        params.gridDimX, params.gridDimY, params.gridDimZ,
        params.blockDimX, params.blockDimY, params.blockDimZ, params.sharedMemBytes,
    )  # fmt: skip


def set_kernel(exec_handle: Any, node: Any, params: Any) -> None:
    """Give kernel ``node`` of the instantiated graph ``params`` (both handles as the
    driver's types, made once by the caller)."""
    cudadrv.cuGraphExecKernelNodeSetParams(exec_handle, node, params)


def driver_handles(exec_handle: Any, node: Any) -> tuple[Any, Any]:
    d = driver()
    return d.CUgraphExec(int(exec_handle)), d.CUgraphNode(int(node))


def memset_params(node: Any) -> Any:
    return cudart.cudaGraphMemsetNodeGetParams(node)


def set_memset(exec_handle: Any, node: Any, params: Any) -> None:
    cudart.cudaGraphExecMemsetNodeSetParams(exec_handle, node, params)


def node_params(graph_nodes: list[Any], label: str) -> tuple[list[tuple[str, int, int]], list[Any]]:
    """Each node's kind and, for a kernel, its function (what a new capture must repeat),
    and each node's parameters."""
    signature, params = [], []
    for node in graph_nodes:
        node_kind = kind(node)
        if node_kind == "kernel":
            kernel = kernel_params(node)
            signature.append((node_kind, int(kernel.func), int(kernel.kern)))
            params.append(kernel)
        elif node_kind == "memset":
            signature.append((node_kind, 0, 0))
            params.append(memset_params(node))
        else:
            raise EagleValueError(
                f"{label} recorded a {node_kind} node; eagle rebinds only kernel and memset nodes"
            )
    return signature, params


def copy_params(exec_handle: Any, targets: list[Any], params: list[Any]) -> None:
    """Give each node of ``targets`` in the instantiated graph its parameters in ``params``
    (from :func:`node_params`)."""
    for target, values in zip(targets, params, strict=True):
        if hasattr(values, "kernelParams"):
            set_kernel(*driver_handles(exec_handle, target), values)
        else:
            set_memset(exec_handle, target, values)
