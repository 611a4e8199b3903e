#!/usr/bin/env python3
"""Writes the project's own hwloc v2 XML topologies for tests/topology.

They are small, made-up machines that pin one behaviour each (see each make_* below); the
real servers the tests also read live in ../shared/topologies and are never copied here.
Run it from this folder after changing it: python3 generate.py
"""
import itertools

_gp = itertools.count(1)


class Obj:
    def __init__(self, type_, children=None, infos=None, **attrs):
        self.type = type_
        self.attrs = attrs
        self.children = children or []
        self.infos = infos or {}
        self.gp = next(_gp)


def cpuset(pus):
    """hwloc bitmap text: 32-bit words, most significant first, comma separated."""
    mask = 0
    for pu in pus:
        mask |= 1 << pu
    words = []
    while True:
        words.append(mask & 0xFFFFFFFF)
        mask >>= 32
        if not mask:
            break
    return ",".join("0x%08x" % w for w in reversed(words))


def cpu_attrs(pus, nodes):
    return dict(cpuset=cpuset(pus), complete_cpuset=cpuset(pus),
                nodeset=cpuset(nodes), complete_nodeset=cpuset(nodes))


def package(os_index, numas, model):
    """numas: list of (numa os index, [pu os indices]) ; hyperthreads pair PUs by core."""
    children = []
    all_pus, all_nodes = [], []
    for node, pus in numas:
        all_pus += pus
        all_nodes.append(node)
        children.append(Obj("NUMANode", os_index=node, local_memory=str(64 << 30),
                            **cpu_attrs(pus, [node])))
    for node, pus in numas:
        for core, pu in enumerate(pus):
            children.append(Obj("Core", os_index=pu, children=[
                Obj("PU", os_index=pu, **cpu_attrs([pu], [node]))], **cpu_attrs([pu], [node])))
    return Obj("Package", os_index=os_index, children=children, infos={"CPUModel": model},
               **cpu_attrs(all_pus, all_nodes))


def busid(bus, dev=0, fn=0):
    return "0000:%02x:%02x.%x" % (bus, dev, fn)


def host_bridge(first_bus, last_bus, children):
    return Obj("Bridge", bridge_type="0-1", depth="0",
               bridge_pci="0000:[%02x-%02x]" % (first_bus, last_bus), children=children)


def bridge(depth, bus, dev, secondary, subordinate, ids="10b5:c010", gbs="31.507692",
           children=None):
    return Obj("Bridge", bridge_type="1-1", depth=str(depth),
               bridge_pci="0000:[%02x-%02x]" % (secondary, subordinate),
               pci_busid=busid(bus, dev), pci_type="0604 [%s] [0000:0000] 00" % ids,
               pci_link_speed=gbs, children=children or [])


def pcidev(bus, pci_class, ids, gbs, children=None, fn=0, subtype=None):
    attrs = dict(pci_busid=busid(bus, 0, fn), pci_type="%s [%s] [0000:0000] a1" % (pci_class, ids),
                 pci_link_speed=gbs)
    if subtype:
        attrs["subtype"] = subtype
    return Obj("PCIDev", children=children or [], **attrs)


def osdev(name, osdev_type, infos=None, subtype=None):
    attrs = dict(name=name, osdev_type=str(osdev_type))
    if subtype:
        attrs["subtype"] = subtype
    return Obj("OSDev", infos=infos or {}, **attrs)


def gpu(bus, ids="10de:20b0", model=None, cuda=0):
    kids = []
    if model:
        kids.append(osdev("cuda%d" % cuda, 5, {"Backend": "CUDA", "GPUModel": model}, "CUDA"))
    return pcidev(bus, "0302", ids, "31.507692", kids)


def rdma_nic(bus, name, netdev, state=4, pci_class="0207", ids="15b3:101b", gbs="31.507692"):
    return pcidev(bus, pci_class, ids, gbs, [
        osdev(netdev, 2, {"Address": "00:11:22:33:44:%02x" % bus}),
        osdev(name, 3, {"Port1State": str(state), "Port1LID": "0x%x" % bus, "Port1LMC": "0"})])


def eth_nic(bus, name, ids="8086:1521", gbs="1.000000"):
    return pcidev(bus, "0200", ids, gbs, [osdev(name, 2, {"Address": "00:aa:bb:cc:dd:%02x" % bus})])


def machine(hostname, packages, extra_children=(), distances=""):
    pus = sorted(int(p) for pkg in packages for p in _pus_of(pkg))
    nodes = sorted({o.attrs["os_index"] for pkg in packages for o in _walk(pkg)
                    if o.type == "NUMANode"})
    root = Obj("Machine", os_index=0, children=list(packages) + list(extra_children),
               infos={"HostName": hostname, "Backend": "Linux", "Architecture": "x86_64"},
               allowed_cpuset=cpuset(pus), allowed_nodeset=cpuset(nodes), **cpu_attrs(pus, nodes))
    return root, distances


def _walk(obj):
    yield obj
    for c in obj.children:
        yield from _walk(c)


def _pus_of(obj):
    return (o.attrs["os_index"] for o in _walk(obj) if o.type == "PU")


ATTR_ORDER = ["type", "os_index", "cpuset", "complete_cpuset", "allowed_cpuset", "nodeset",
              "complete_nodeset", "allowed_nodeset", "gp_index", "name", "subtype", "osdev_type",
              "bridge_type", "depth", "bridge_pci", "pci_busid", "pci_type", "pci_link_speed",
              "local_memory", "kind", "subkind"]


def emit(obj, indent, out):
    attrs = dict(obj.attrs, type=obj.type, gp_index=obj.gp)
    text = " ".join('%s="%s"' % (k, attrs[k]) for k in ATTR_ORDER if k in attrs)
    pad = "  " * indent
    if not obj.children and not obj.infos:
        out.append("%s<object %s/>" % (pad, text))
        return
    out.append("%s<object %s>" % (pad, text))
    for k, v in obj.infos.items():
        out.append('%s  <info name="%s" value="%s"/>' % (pad, k, v))
    for c in obj.children:
        emit(c, indent + 1, out)
    out.append("%s</object>" % pad)


def nvlink_matrix(objs, pairs):
    """A homogeneous NVLinkBandwidth matrix over PCI devices; pairs: {(i, j): MB/s}."""
    n = len(objs)
    values = [0] * (n * n)
    for (i, j), mbs in pairs.items():
        values[i * n + j] = values[j * n + i] = mbs
    indexes = " ".join(str(o.gp) for o in objs) + " "
    vals = " ".join(str(v) for v in values) + " "
    return ('  <distances2 type="PCIDev" nbobjs="%d" kind="9" name="NVLinkBandwidth" '
            'indexing="gp">\n    <indexes length="%d">%s</indexes>\n'
            '    <u64values length="%d">%s</u64values>\n  </distances2>\n'
            % (n, len(indexes), indexes, len(vals), vals))


def write(path, comment, root_and_distances):
    root, distances = root_and_distances
    out = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
           "<!-- %s -->" % comment, '<topology version="2.0">']
    emit(root, 1, out)
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n" + distances + "</topology>\n")


def make_dgx_a100_like():
    """2 sockets x 2 NUMA nodes; each NUMA node has one PCIe switch with 2 A100s and 2 ConnectX-6.
    NUMA 0 and 1 nest a sub-switch per GPU+NIC pair (GPU i and mlx5_i are PIX, the pair's other
    NIC PXB); NUMA 2 and 3 are flat (both NICs PIX to both GPUs: only balancing separates them).
    Six NVSwitches give every GPU 6 x 50 GB/s. GPUs have no cuda/nvml OS devices."""
    pkgs = [package(s, [(2 * s + k, list(range(8 * (2 * s + k), 8 * (2 * s + k) + 8)))
                        for k in range(2)], "AMD EPYC 7742 64-Core Processor") for s in range(2)]
    gpus = []
    for numa in range(4):
        b = 0x10 + 0x30 * numa  # buses b .. b+0x2f
        if numa < 2:
            subs = []
            for k in range(2):
                i = 2 * numa + k
                sb = b + 3 + 4 * k  # sub-switch upstream bus
                g = gpu(sb + 2)
                gpus.append(g)
                subs.append(bridge(3, b + 2, 4 * k, sb, sb + 3, children=[
                    bridge(4, sb, 0, sb + 1, sb + 3, children=[
                        bridge(5, sb + 1, 0, sb + 2, sb + 2, children=[g]),
                        bridge(5, sb + 1, 1, sb + 3, sb + 3, children=[
                            rdma_nic(sb + 3, "mlx5_%d" % i, "ibp%ds0" % (sb + 3))])])]))
            top = bridge(2, b + 1, 0, b + 2, b + 0x2f, children=subs)
        else:
            g0, g1 = gpu(b + 3), gpu(b + 4)
            gpus += [g0, g1]
            i = 2 * numa
            top = bridge(2, b + 1, 0, b + 2, b + 0x2f, children=[
                bridge(3, b + 2, 0, b + 3, b + 3, children=[g0]),
                bridge(3, b + 2, 1, b + 4, b + 4, children=[g1]),
                bridge(3, b + 2, 2, b + 5, b + 5, children=[
                    rdma_nic(b + 5, "mlx5_%d" % i, "ibp%ds0" % (b + 5))]),
                bridge(3, b + 2, 3, b + 6, b + 6, children=[
                    rdma_nic(b + 6, "mlx5_%d" % (i + 1), "ibp%ds0" % (b + 6))])])
        hb = host_bridge(b, b + 0x2f, [bridge(1, b, 1, b + 1, b + 0x2f, ids="1022:1483",
                                              children=[top])])
        pkgs[numa // 2].children.append(hb)  # moved under its NUMA node's Group below
    nvswitches = [pcidev(0xe0 + k, "0680", "10de:1af1", "1.000000") for k in range(6)]
    nvs_hb = host_bridge(0xdf, 0xef, [bridge(1, 0xdf, 1, 0xe0, 0xe5, ids="1022:1483",
                                             children=nvswitches)])
    eth = host_bridge(0x0e, 0x0f, [bridge(1, 0x0e, 1, 0x0f, 0x0f, ids="1022:1483",
                                          children=[eth_nic(0x0f, "eno1")])])
    _attach_per_numa(pkgs, [eth, nvs_hb])
    pairs = {(g, 8 + k): 50000 for g in range(8) for k in range(6)}
    return machine("dgx-a100-like", pkgs, distances=nvlink_matrix(gpus + nvswitches, pairs))


def _attach_per_numa(pkgs, extra_numa0):
    """hwloc puts each NUMA node's I/O under a Group spanning that node's CPUs (as SNC/NPS
    machines show). Regroup each package: one Group per NUMA node with its cores and bridges."""
    for pkg in pkgs:
        numas = [c for c in pkg.children if c.type == "NUMANode"]
        cores = [c for c in pkg.children if c.type == "Core"]
        bridges = [c for c in pkg.children if c.type == "Bridge"]
        groups = []
        for idx, numa in enumerate(numas):
            node = numa.attrs["os_index"]
            mine = [c for c in cores if c.attrs["nodeset"] == cpuset([node])]
            pus = [p for c in mine for p in _pus_of(c)]
            io = [bridges[idx]] if idx < len(bridges) else []
            if node == 0:
                io += extra_numa0
            groups.append(Obj("Group", kind="1001", subkind="0",
                              children=[numa] + mine + io, **cpu_attrs(pus, [node])))
        pkg.children = groups


def make_two_socket_far_nic():
    """2 sockets, 1 NUMA node each, hyperthreaded (PU numbering as Linux: 0-3,8-11 / 4-7,12-15).
    Socket 0: one PCIe switch with GPU0, GPU1 and the only RDMA NIC (mlx5_0), plus a Matrox VGA
    that is not a GPU. Socket 1: a switch with GPU2, GPU3 and an Ethernet NIC (eth1) on its own
    root port. One Ethernet NIC (eth9) hangs off the machine: its NUMA node is unknown."""
    p100 = "Tesla P100-PCIE-16GB"
    s0 = package(0, [(0, [0, 1, 2, 3, 8, 9, 10, 11])], "Intel(R) Xeon(R) CPU E5-2680 v4")
    s1 = package(1, [(1, [4, 5, 6, 7, 12, 13, 14, 15])], "Intel(R) Xeon(R) CPU E5-2680 v4")
    s0.children.append(host_bridge(0x00, 0x0f, [
        bridge(1, 0x00, 3, 0x02, 0x08, ids="8086:6f08", gbs="15.753846", children=[
            bridge(2, 0x02, 0, 0x03, 0x08, ids="10b5:8796", gbs="15.753846", children=[
                bridge(3, 0x03, 4, 0x04, 0x04, ids="10b5:8796", children=[
                    gpu(0x04, "10de:15f8", p100, 0)]),
                bridge(3, 0x03, 8, 0x05, 0x05, ids="10b5:8796", children=[
                    gpu(0x05, "10de:15f8", p100, 1)]),
                bridge(3, 0x03, 0x10, 0x06, 0x06, ids="10b5:8796", children=[
                    rdma_nic(0x06, "mlx5_0", "ib0", ids="15b3:1017", gbs="15.753846")])])]),
        bridge(1, 0x00, 0x1c, 0x0a, 0x0a, ids="8086:8d14", gbs="0.250000", children=[
            pcidev(0x0a, "0300", "102b:0536", "0.250000")])]))
    s1.children.append(host_bridge(0x80, 0x8f, [
        bridge(1, 0x80, 3, 0x82, 0x88, ids="8086:6f08", gbs="15.753846", children=[
            bridge(2, 0x82, 0, 0x83, 0x88, ids="10b5:8796", gbs="15.753846", children=[
                bridge(3, 0x83, 4, 0x84, 0x84, ids="10b5:8796", children=[
                    gpu(0x84, "10de:15f8", p100, 2)]),
                bridge(3, 0x83, 8, 0x85, 0x85, ids="10b5:8796", children=[
                    gpu(0x85, "10de:15f8", p100, 3)])])]),
        bridge(1, 0x80, 2, 0x8a, 0x8a, ids="8086:6f04", gbs="7.876923", children=[
            eth_nic(0x8a, "eth1", ids="8086:1572", gbs="7.876923")])]))
    unplaced = host_bridge(0xf0, 0xf1, [bridge(1, 0xf0, 1, 0xf1, 0xf1, ids="8086:6f02",
                                               children=[eth_nic(0xf1, "eth9")])])
    return machine("two-socket", [s0, s1], extra_children=[unplaced])


def make_no_gpu():
    """One socket, no GPU: a ConnectX-5 in Ethernet mode (RoCE: class 0200 with a verbs device)
    and an onboard Ethernet NIC. The RoCE port is down."""
    s0 = package(0, [(0, [0, 1, 2, 3])], "Intel(R) Xeon(R) E-2288G")
    s0.children.append(host_bridge(0x00, 0x03, [
        bridge(1, 0x00, 1, 0x01, 0x01, ids="8086:1901", gbs="7.876923", children=[
            rdma_nic(0x01, "mlx5_0", "enp1s0f0np0", state=1, pci_class="0200", ids="15b3:1017",
                     gbs="7.876923")]),
        bridge(1, 0x00, 0x1c, 0x02, 0x02, ids="8086:a33c", gbs="0.250000", children=[
            eth_nic(0x02, "eno1")]),
        bridge(1, 0x00, 0x1d, 0x03, 0x03, ids="8086:a330", gbs="3.938462", children=[
            pcidev(0x03, "0108", "144d:a808", "3.938462")])]))
    return machine("no-gpu", [s0])


def make_two_gpu_crossed_eth():
    """One socket, two PCIe switches, each with one GPU and one Ethernet NIC, crossed against
    their names: GPU0 (bus 04) shares its switch with eth1, GPU1 (bus 84) with eth0. A rank on
    GPU0 pairs with eth1 where counting local ranks would give it eth0 (the emulated hosts'
    rails are eth0 and eth1)."""
    a100 = "NVIDIA A100-SXM4-40GB"
    s0 = package(0, [(0, [0, 1, 2, 3])], "AMD EPYC 7302 16-Core Processor")
    switches = []
    for g, (bus, nic) in enumerate([(0x04, "eth1"), (0x84, "eth0")]):
        up = bus - 2
        switches.append(host_bridge(up - 1, bus + 1, [
            bridge(1, up - 1, 1, up, bus + 1, ids="1022:1483", children=[
                bridge(2, up, 0, up + 1, bus + 1, ids="10b5:8796", children=[
                    bridge(3, up + 1, 0, bus, bus, ids="10b5:8796", children=[
                        gpu(bus, "10de:20b0", a100, g)]),
                    bridge(3, up + 1, 1, bus + 1, bus + 1, ids="10b5:8796", children=[
                        eth_nic(bus + 1, nic, ids="8086:1572", gbs="7.876923")])])])]))
    s0.children += switches
    return machine("two-gpu-crossed-eth", [s0])


if __name__ == "__main__":
    write("dgx-a100-like.xml", "made up for ddl's tests by generate.py", make_dgx_a100_like())
    write("two-socket-far-nic.xml", "made up for ddl's tests by generate.py",
          make_two_socket_far_nic())
    write("no-gpu.xml", "made up for ddl's tests by generate.py", make_no_gpu())
    write("two-gpu-crossed-eth.xml", "made up for ddl's tests by generate.py",
          make_two_gpu_crossed_eth())
