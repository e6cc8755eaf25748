//! Tensor-core (`mma.sync`) layouts and the shared-memory staging of dot operands.
//!
//! Lane `l` of a warp is `(g, t) = (l / 4, l % 4)`. For `m16n8k16` (f16/bf16, two elements per
//! 32-bit register, lower column in the low half) and `m16n8k8` (tf32, one element per register)
//! the PTX ISA ("Matrix Fragments for mma.m16n8k16 / m16n8k8") puts:
//!
//! ```text
//! C/D  (16x8, f32): c0,c1 = C[g][2t], C[g][2t+1];  c2,c3 = C[g+8][2t], C[g+8][2t+1]
//! A f16 (16x16):    a0 = A[g][2t..2t+1]  a1 = A[g+8][2t..2t+1]  a2 = A[g][2t+8..]  a3 = A[g+8][2t+8..]
//! B f16 (16x8):     b0 = B[2t..2t+1][g]  b1 = B[2t+8..2t+9][g]
//! A tf32 (16x8):    a0 = A[g][t]  a1 = A[g+8][t]  a2 = A[g][t+4]  a3 = A[g+8][t+4]
//! B tf32 (8x8):     b0 = B[t][g]  b1 = B[t+4][g]
//! ```
//!
//! `m16n8k32` (fp8, four elements per register, lowest column in the low byte) is the f16
//! layout in bytes: `a0 = A[g][4t..4t+3]`, `a2 = A[g][4t+16..]`, `b0 = B[4t..4t+3][g]`,
//! `b1 = B[4t+16..][g]`, so one 16-byte `ldmatrix` row is 16 fp8 elements of K.
//!
//! As [`Layout`]s over a tile (`wm x wn` warps; warp `w` is `(w / wn, w % wn)` along M and N):
//!
//! ```text
//! accumulator [M, N]: rows interleaved  spt 2 (g, g+8), tpw 8, wpc wm   -> row = 16*wm*rep + 8*j + g + 16*warp_m
//!                     cols blocked      spt 2 (2t, 2t+1), tpw 4, wpc wn -> col = 8*wn*rep + 2t + j + 8*warp_n
//! operand A [M, K]:   rows as the accumulator; K blocked spt kw, tpw 4, wpc 1 (kw = 4 / element bytes)
//! operand B [K, N]:   K blocked spt kw, tpw 4, wpc 1; N blocked spt 1, tpw 8 (g), wpc wn
//! ```
//!
//! With `wn = 1` the accumulator layout of one dot *is* the f16 A-operand layout of the next, so
//! `dot(p.to::<bf16>(), v)` with `p` computed from an accumulator reads `p` from registers.
//! Operand layouts replicate over the warps of the other dimension; they are keys for operand
//! registers, never the source or target of a generic layout conversion (unless equal to an
//! accumulator layout, which has all warps).
//!
//! Staging: an operand (or, for `x.trans()`, its untransposed source) is written row-major to
//! shared memory with 16-byte chunks XOR-swizzled by row ([`Swizzle`]) and read with
//! `ldmatrix.x4` (`.trans` when K is the stored row dimension, f16/bf16 only; tf32 and fp8
//! operands are always stored with K contiguous).

use crate::layout::Layout;

/// The element kind of a tensor-core dot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MmaKind {
    F16,
    BF16,
    Tf32,
    /// fp8 (`f8e4m3`, `f8e5m2`): `m16n8k32`, four elements a register, on sm_89 and newer.
    E4M3,
    E5M2,
}

impl MmaKind {
    /// K of one instruction: 32 bytes of K a row (8 tf32, 16 f16, 32 fp8).
    pub fn k_step(self) -> u32 {
        32 / self.elem_bytes()
    }

    /// Consecutive K elements a thread holds in one 32-bit register (one tf32, two halves,
    /// four fp8 bytes).
    pub fn k_width(self) -> u32 {
        4 / self.elem_bytes()
    }

    /// Bytes per element in shared memory.
    pub fn elem_bytes(self) -> u32 {
        match self {
            MmaKind::Tf32 => 4,
            MmaKind::F16 | MmaKind::BF16 => 2,
            MmaKind::E4M3 | MmaKind::E5M2 => 1,
        }
    }

    /// Whether `ldmatrix.trans` reads the operand with K as the stored row: only for 16-bit
    /// elements (it transposes 16-bit elements); other kinds are always stored K-major.
    pub fn transposable(self) -> bool {
        self.elem_bytes() == 2
    }

    /// The element type's name in PTX opcodes.
    pub fn ptx_type(self) -> &'static str {
        match self {
            MmaKind::F16 => "f16",
            MmaKind::BF16 => "bf16",
            MmaKind::Tf32 => "tf32",
            MmaKind::E4M3 => "e4m3",
            MmaKind::E5M2 => "e5m2",
        }
    }

    /// The full `mma.sync` opcode with A of this kind and B of kind `b` (the same kind, or
    /// the other fp8 format).
    pub fn opcode(self, b: MmaKind) -> String {
        format!(
            "mma.sync.aligned.m16n8k{}.row.col.f32.{}.{}.f32",
            self.k_step(),
            self.ptx_type(),
            b.ptx_type()
        )
    }

    /// Whether this is one of the fp8 formats.
    pub fn is_fp8(self) -> bool {
        matches!(self, MmaKind::E4M3 | MmaKind::E5M2)
    }
}

/// Which operand of `a @ b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    A,
    B,
}

/// Warps along M and N for an `[m, n]` accumulator. `chained` dots (whose result feeds, or
/// whose A operand comes from, another dot) put warps along M first so that P stays in
/// registers; others balance the warp tile. Warps left over once every 16x8 tile has one
/// replicate along M.
pub fn warps_for(m: u32, n: u32, num_warps: u32, chained: bool) -> (u32, u32) {
    let (mt, nt) = ((m / 16).max(1), (n / 8).max(1));
    let (mut wm, mut wn) = (1u32, 1u32);
    while wm * wn < num_warps {
        let grow_m = if chained {
            wm < mt
        } else {
            wm < mt && (mt / wm >= nt / wn || wn >= nt)
        };
        if grow_m || wn >= nt {
            wm *= 2;
        } else {
            wn *= 2;
        }
    }
    (wm, wn)
}

/// The accumulator layout of a dot with `wm x wn` warps.
pub fn accumulator(wm: u32, wn: u32) -> Layout {
    Layout {
        spt: vec![2, 2],
        tpw: vec![8, 4],
        wpc: vec![wm, wn],
        order: vec![1, 0],
        sliced: vec![],
        interleaved: vec![true, false],
    }
}

/// The A-operand layout (`[M, K]`, registers one element each).
pub fn operand_a(kind: MmaKind, wm: u32) -> Layout {
    Layout {
        spt: vec![2, kind.k_width()],
        tpw: vec![8, 4],
        wpc: vec![wm, 1],
        order: vec![1, 0],
        sliced: vec![],
        interleaved: vec![true, false],
    }
}

/// The B-operand layout (`[K, N]`, registers one element each).
pub fn operand_b(kind: MmaKind, wn: u32) -> Layout {
    Layout {
        spt: vec![kind.k_width(), 1],
        tpw: vec![4, 8],
        wpc: vec![1, wn],
        order: vec![0, 1],
        sliced: vec![],
        interleaved: vec![false, false],
    }
}

/// Register counters (per axis, in the operand layout's geometry) of element `e` of fragment
/// register `j` of the A fragment for m-tile `rm` and k-step `kk`.
pub fn a_counters(kind: MmaKind, rm: usize, kk: usize, j: usize, e: usize) -> [usize; 2] {
    let kw = kind.k_width() as usize;
    [2 * rm + (j & 1), (2 * kk + (j >> 1)) * kw + e]
}

/// Register counters of element `e` of B fragment register `j` for n-tile `rn`, k-step `kk`.
pub fn b_counters(kind: MmaKind, rn: usize, kk: usize, j: usize, e: usize) -> [usize; 2] {
    let kw = kind.k_width() as usize;
    [(2 * kk + j) * kw + e, rn]
}

/// Register counters of accumulator register `j` (c0..c3) of tile `(rm, rn)`.
pub fn c_counters(rm: usize, rn: usize, j: usize) -> [usize; 2] {
    [2 * rm + (j >> 1), 2 * rn + (j & 1)]
}

/// XOR swizzle of 16-byte chunks in a row-major shared tile: chunk `c` of row `r` is stored at
/// chunk `c ^ phase(r)`, `phase(r) = (r / per_phase) % max_phase`, so the eight 16-byte rows an
/// `ldmatrix` phase reads (same logical chunk, eight consecutive rows) fall in eight different
/// groups of four banks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Swizzle {
    pub row_bytes: u32,
    pub per_phase: u32,
    pub max_phase: u32,
}

impl Swizzle {
    pub fn for_row_bytes(row_bytes: u32) -> Swizzle {
        Swizzle {
            row_bytes,
            per_phase: (128 / row_bytes).max(1),
            max_phase: (row_bytes / 16).clamp(1, 8),
        }
    }

    pub fn phase(&self, row: u32) -> u32 {
        (row / self.per_phase) % self.max_phase
    }

    /// Byte offset of byte `col_byte` of row `row`.
    pub fn offset(&self, row: u32, col_byte: u32) -> u32 {
        row * self.row_bytes + (((col_byte / 16) ^ self.phase(row)) * 16) + col_byte % 16
    }
}

/// Where a staged operand lives: `rows x cols` elements row-major at byte `offset` of the
/// scratch buffer; `k_major` when K is the stored column (plain `ldmatrix`), else K is the
/// stored row (`ldmatrix.trans`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stage {
    pub role: Role,
    pub kind: MmaKind,
    pub rows: u32,
    pub cols: u32,
    pub k_major: bool,
    pub offset: u32,
    /// Stored as panels of 128-byte rows (64 f16 columns), each panel `rows` rows contiguous,
    /// instead of full rows: the layout `wgmma` descriptors read when a row is wider than 128
    /// bytes (only for slots a `wgmma` reads; `ldmatrix` reads full rows).
    pub panel_major: bool,
}

impl Stage {
    pub fn swizzle(&self) -> Swizzle {
        Swizzle::for_row_bytes(self.cols * self.kind.elem_bytes())
    }

    /// Bytes from one stored row to the next: a full row, or a panel's 128 bytes.
    pub fn row_pitch(&self) -> u32 {
        if self.panel_major {
            128
        } else {
            self.swizzle().row_bytes
        }
    }

    /// Byte offset (from the stage's start) of byte `col_byte` of row `row`: the swizzled
    /// row-major offset, or with [`Stage::panel_major`] the same 16-byte chunk swizzle within
    /// panel `col_byte / 128` (the phase only flips chunk bits below 128 bytes, so panels stay
    /// whole).
    pub fn stored_offset(&self, row: u32, col_byte: u32) -> u32 {
        let sw = self.swizzle();
        if !self.panel_major {
            return sw.offset(row, col_byte);
        }
        let swizzled = col_byte ^ (sw.phase(row) * 16);
        (swizzled / 128) * self.rows * 128 + row * 128 + swizzled % 128
    }

    /// Bytes from one group of 8 chunks (128 bytes) of a stored row to the next: 128, or with
    /// [`Stage::panel_major`] one panel (`rows` rows of 128 bytes).
    pub fn chunk_group_bytes(&self) -> u32 {
        if self.panel_major {
            self.rows * 128
        } else {
            128
        }
    }

    pub fn bytes(&self) -> u32 {
        self.rows * self.cols * self.kind.elem_bytes()
    }

    /// Elements per 16-byte chunk.
    fn chunk_elems(&self) -> u32 {
        16 / self.kind.elem_bytes()
    }

    /// The stored (row, chunk) of lane `lane`'s row address relative to the origin of one
    /// x4 load. Matrices `i = lane / 8`: for A, `i & 1` picks rows 8-15 of the m16 tile and
    /// `i >> 1` the upper K half; for B, `i & 1` the upper K half and `i >> 1` the second
    /// n-tile of the warp (8 * wn columns further).
    pub fn lane_term(&self, wn: u32, lane: u32) -> (u32, u32) {
        let (i, r) = (lane / 8, lane % 8);
        let (outer_bit, k_bit) = match self.role {
            Role::A => (i & 1, i >> 1),
            Role::B => (i >> 1, i & 1),
        };
        let outer_step = match self.role {
            Role::A => 8,
            Role::B => 8 * wn,
        };
        if self.k_major {
            (r + outer_step * outer_bit, k_bit)
        } else {
            (r + 8 * k_bit, outer_step * outer_bit / self.chunk_elems())
        }
    }

    /// The stored (row, chunk) origin of warp `(warp_m, warp_n)`: its first m rows (A) or n
    /// columns (B) of the operand, wrapped at the tile size when warps replicate.
    pub fn warp_term(&self, warp_m: u32, warp_n: u32, m_or_n: u32) -> (u32, u32) {
        let outer = match self.role {
            Role::A => (16 * warp_m) % m_or_n,
            Role::B => (8 * warp_n) % m_or_n,
        };
        if self.k_major {
            (outer, 0)
        } else {
            (0, outer / self.chunk_elems())
        }
    }

    /// The stored (row, chunk) origin of one load: m-tile / first n-tile `r_outer` (in
    /// elements: `rm * 16 * wm` or `rn * 8 * wn`) and k-step `kk`.
    pub fn instr_term(&self, outer: u32, kk: u32) -> (u32, u32) {
        let k = kk * self.kind.k_step();
        if self.k_major {
            (outer, k / self.chunk_elems())
        } else {
            (k, outer / self.chunk_elems())
        }
    }

    /// The byte address (relative to the scratch buffer) lane `lane` passes to `ldmatrix`.
    pub fn ldmatrix_address(&self, lane: (u32, u32), warp: (u32, u32), instr: (u32, u32)) -> u32 {
        let row = lane.0 + warp.0 + instr.0;
        let chunk = lane.1 + warp.1 + instr.1;
        self.offset + self.stored_offset(row, chunk * 16)
    }

    /// The same address split as the lowering emits it: a per-thread register chosen by
    /// `instr.1 % 8` (computed once) plus an immediate. Valid because warp and instruction rows
    /// are multiples of 8 (the swizzle phase repeats every 8 rows) and adding whole groups of 8
    /// chunks commutes with XOR by a phase below 8.
    pub fn split_address(
        &self,
        lane: (u32, u32),
        warp: (u32, u32),
        instr: (u32, u32),
    ) -> (u32, u32) {
        let sw = self.swizzle();
        let lo = instr.1 % 8;
        let row = lane.0 + warp.0;
        let chunk = (lane.1 + warp.1 + lo) ^ sw.phase(lane.0 % 8);
        let group = self.chunk_group_bytes();
        let reg = self.offset + row * self.row_pitch() + (chunk / 8) * group + (chunk % 8) * 16;
        let imm = instr.0 * self.row_pitch() + (instr.1 - lo) / 8 * group;
        (reg, imm)
    }
}
