"""The rainbow-path search behind :func:`hpccoll.hamiltonian.decompose` for n % 4 == 2.

Given a complete digraph whose arcs are coloured so that every vertex has one out-arc of each
colour, find a Hamiltonian path whose arcs all have different colours.  A small constraint
solver: most-constrained vertex or colour first, forward checking, subtour elimination, and
deterministic restarts (``random.Random`` with seeds 0, 1, 2, ...) under slowly growing node
limits, so the result is the same on every run.  Pure: the standard library only.
"""

from __future__ import annotations

import random


def rainbow_path(colour: list[list[int]], n_colours: int) -> list[int]:
    """A rainbow Hamiltonian path (vertices in order) of the digraph coloured by
    ``colour[u][v]`` (-1 on the diagonal), with ``n_colours`` = vertices - 1 colours."""
    n_vertices = len(colour)
    attempt = 0
    while True:
        limit = 48 * n_vertices * 2 ** (attempt // 4)
        try:
            path = _RainbowSearch(colour, n_colours, attempt).solve(limit)
        except _SearchLimit:
            attempt += 1
            continue
        if path is None:
            raise RuntimeError(f"no rainbow Hamiltonian path on {n_vertices} vertices")
        return path


class _SearchLimit(Exception):
    pass


class _RainbowSearch:
    """A Hamiltonian path of a complete digraph on V = n_colours + 1 vertices whose arcs have
    pairwise distinct colours (``colour[u][v]``; each vertex has one out-arc of each colour).

    Modelled as a Hamiltonian cycle through an extra uncoloured vertex ``x = V``: choose a
    successor for every vertex.  Domains are bitmasks (successor vertices, and the colours
    they would use); forward checking removes taken vertices and colours; a partial chain
    may not close early; forced choices (a vertex or colour with one way left) go first,
    then the scarcer of the smallest successor domain and the least supported colour.  Every
    change is recorded on a trail, so that a choice can be taken back.
    """

    def __init__(self, colour: list[list[int]], n_colours: int, seed: int) -> None:
        n_vertices = n_colours + 1
        self.colour = colour
        self.x = n_vertices
        self.total = n_vertices + 1
        self.rng = random.Random(seed)
        self.target = [[-1] * self.total for _ in range(n_colours)]  # u's out-arc of colour c
        for u in range(n_vertices):
            for v in range(n_vertices):
                if u != v:
                    self.target[colour[u][v]][u] = v
        all_colours = (1 << n_colours) - 1
        # possible successors, and the colours of the arcs to them
        self.domain = [((1 << self.total) - 1) & ~(1 << u) for u in range(self.total)]
        self.colours_left = [all_colours] * n_vertices + [0]
        self.succ = [-1] * self.total
        self.pred = [-1] * self.total
        self.unused = all_colours
        # (vertex, old domain, old colours) or (-1, u, colour of the arc from u)
        self.trail: list[tuple[int, int, int]] = []

    def solve(self, node_limit: int) -> list[int] | None:
        """Depth-first search with an explicit stack (no recursion limit for large n).
        Returns the path, or None if the whole space was searched in vain; raises
        _SearchLimit after node_limit assignments."""
        options = self.branches()
        solved = options is None
        stack = [] if solved else [[options, 0, len(self.trail)]]
        nodes = 0
        while stack and not solved:
            frame = stack[-1]
            options, index, mark = frame
            self.undo(mark)  # take back the previous option of this frame
            if index == len(options):
                stack.pop()
                continue
            frame[1] = index + 1
            self.assign(*options[index])
            nodes += 1
            if nodes > node_limit:
                raise _SearchLimit
            options = self.branches()
            if options is None:
                solved = True
            else:
                stack.append([options, 0, len(self.trail)])
        return self.path() if solved else None

    def path(self) -> list[int]:
        """The solved cycle through x, without x."""
        path, v = [], self.succ[self.x]
        while v != self.x:
            path.append(v)
            v = self.succ[v]
        return path

    def assign(self, u: int, v: int) -> None:
        """Take the arc u -> v and propagate."""
        c = -1 if self.x in (u, v) else self.colour[u][v]
        self.succ[u] = v
        self.pred[v] = u
        if c >= 0:
            self.unused &= ~(1 << c)
        self.trail.append((-1, u, c))
        self._forward_check(v, c)
        self._forbid_early_close(u, v)

    def undo(self, mark: int) -> None:
        """Take back everything after trail position ``mark``."""
        trail, domain, colours_left = self.trail, self.domain, self.colours_left
        while len(trail) > mark:
            w, a, b = trail.pop()
            if w < 0:
                self.pred[self.succ[a]] = -1
                self.succ[a] = -1
                if b >= 0:
                    self.unused |= 1 << b
            else:
                domain[w], colours_left[w] = a, b

    def _restrict(self, w: int, domain: int, colours: int) -> None:
        """Narrow vertex w's domain and colours to these, recording the old ones."""
        if domain != self.domain[w] or colours != self.colours_left[w]:
            self.trail.append((w, self.domain[w], self.colours_left[w]))
            self.domain[w], self.colours_left[w] = domain, colours

    def _forward_check(self, v: int, c: int) -> None:
        """No other vertex may take v as successor, no other arc may have colour c."""
        keep, x, colour, target = ~(1 << v), self.x, self.colour, self.target
        for w in range(self.total):
            if self.succ[w] >= 0:
                continue
            domain, colours = self.domain[w] & keep, self.colours_left[w]
            if w != x:
                if v != x and w != v:
                    colours &= ~(1 << colour[w][v])
                if c >= 0:
                    domain &= ~(1 << target[c][w])
                    colours &= ~(1 << c)
            self._restrict(w, domain, colours)

    def _forbid_early_close(self, u: int, v: int) -> None:
        """The chain through u -> v must not close before it holds every vertex."""
        head, length = u, 2
        while self.pred[head] >= 0 and head != v:
            head = self.pred[head]
            length += 1
        tail = v
        while self.succ[tail] >= 0 and tail != u:
            tail = self.succ[tail]
            length += 1
        if length < self.total and self.domain[tail] >> head & 1:
            colours = self.colours_left[tail]
            if self.x not in (tail, head):
                colours &= ~(1 << self.colour[tail][head])
            self._restrict(tail, self.domain[tail] & ~(1 << head), colours)

    def branches(self) -> list[tuple[int, int]] | None:
        """Arcs to try next; [] at a dead end, None when every vertex has a successor."""
        free = [u for u in range(self.total) if self.succ[u] < 0]
        if not free:
            return None
        best_size, best_vertex = self.total + 1, -1
        reach_once = reach_twice = colour_once = colour_twice = 0
        for u in free:
            d, cl = self.domain[u], self.colours_left[u]
            size = d.bit_count()
            if size < best_size:
                best_size, best_vertex = size, u
            reach_twice |= reach_once & d
            reach_once |= d
            colour_twice |= colour_once & cl
            colour_once |= cl
        need_pred = sum(1 << v for v in range(self.total) if self.pred[v] < 0)
        if best_size == 0 or need_pred & ~reach_once or self.unused & ~colour_once:
            return []
        if best_size > 1:
            forced = self._forced(free, need_pred & ~reach_twice, self.unused & ~colour_twice)
            if forced is not None:
                return [forced]
        if best_size > 2:
            options = self._scarcest_colour_arcs(free, best_size)
            if options is not None:
                return options
        d = self.domain[best_vertex]
        options = [(best_vertex, v) for v in range(self.total) if d >> v & 1]
        self.rng.shuffle(options)
        return options

    def _forced(self, free: list[int], lone_vertices: int, lone_colours: int
                ) -> tuple[int, int] | None:
        """An arc that must be taken: into a vertex with a single possible predecessor, or
        else of a colour with a single possible arc (the masks of both, highest first)."""
        if lone_vertices:
            v = lone_vertices.bit_length() - 1
            return next((u, v) for u in free if self.domain[u] >> v & 1)
        if lone_colours:
            c = lone_colours.bit_length() - 1
            return next((u, self.target[c][u]) for u in free if self.colours_left[u] >> c & 1)
        return None

    def _scarcest_colour_arcs(self, free: list[int], fewest: int
                              ) -> list[tuple[int, int]] | None:
        """The possible arcs, shuffled, of the unused colour with the fewest of them if that
        is fewer than ``fewest`` (any with at most 2 will do); None if no colour has."""
        scarcest = -1
        left = self.unused
        while left:
            c = left.bit_length() - 1
            left &= ~(1 << c)
            bit, support = 1 << c, 0
            for u in free:
                if self.colours_left[u] & bit:
                    support += 1
                    if support >= fewest:
                        break
            if support < fewest:
                fewest, scarcest = support, c
                if support <= 2:
                    break
        if scarcest < 0:
            return None
        bit = 1 << scarcest
        options = [(u, self.target[scarcest][u]) for u in free if self.colours_left[u] & bit]
        self.rng.shuffle(options)
        return options
