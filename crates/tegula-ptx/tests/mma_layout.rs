//! The tensor-core layouts, simulated in Rust against the PTX ISA's documented fragment maps
//! ("Matrix Fragments for mma.m16n8k16 / mma.m16n8k8 / mma.m16n8k32") and `ldmatrix` semantics: every
//! (warp, lane, register) of the accumulator, A and B layouts must hold the element the
//! instruction expects, and `ldmatrix` from the swizzled stage must deliver exactly those
//! elements, without bank conflicts.

use std::collections::{HashMap, HashSet};
use tegula_ir::Shape;
use tegula_ptx::layout::Layout;
use tegula_ptx::mma_layout::{self as ml, MmaKind, Role, Stage, Swizzle};

const KINDS: [MmaKind; 5] = [
    MmaKind::F16,
    MmaKind::BF16,
    MmaKind::Tf32,
    MmaKind::E4M3,
    MmaKind::E5M2,
];

/// The element (row, col) a thread holds in register counters `c` of `l`, straight from the
/// layout formula in `layout.rs`'s docs (independent of `RegGeometry`), with explicit warp
/// coordinates per axis.
fn element(l: &Layout, shape: [u32; 2], lane: u32, warp: [u32; 2], c: [usize; 2]) -> [u32; 2] {
    let ls = l.lane_strides();
    let mut out = [0u32; 2];
    for d in 0..2 {
        let (spt, tpw, wpc, p) = (l.spt[d], l.tpw[d], l.wpc[d], shape[d]);
        let lane_d = (lane / ls[d]) % tpw;
        let cover = spt * tpw * wpc;
        let c = c[d] as u32;
        out[d] = if l.interleaved[d] {
            let s = (p / tpw).clamp(1, spt);
            let (rep, j) = (c / s, c % s);
            rep * cover + (j * tpw + lane_d + spt * tpw * warp[d]) % p
        } else {
            let s = spt.min(p);
            let (rep, j) = (c / s, c % s);
            rep * cover + ((lane_d + tpw * warp[d]) * spt) % p + j
        };
        assert!(out[d] < p, "{l:?} puts an element outside {shape:?}");
    }
    out
}

/// The PTX ISA's (row, col) of element `e` of fragment register `j` for lane `lane`, relative
/// to the 16x8 (C), 16xk (A) or kx8 (B) tile.
fn isa_a(kind: MmaKind, lane: u32, j: u32, e: u32) -> (u32, u32) {
    let (g, t) = (lane / 4, lane % 4);
    match kind {
        // a_i, i = 2j + e: row g for i < 2 or 4 <= i < 6, else g + 8; col 2t + (i & 1), +8 for i >= 4.
        MmaKind::F16 | MmaKind::BF16 => {
            let i = 2 * j + e;
            let row = if i < 2 || (4..6).contains(&i) {
                g
            } else {
                g + 8
            };
            let col = 2 * t + (i & 1) + if i >= 4 { 8 } else { 0 };
            (row, col)
        }
        // tf32: row g for a0, a2, g + 8 for a1, a3; col t for a0, a1, t + 4 for a2, a3.
        MmaKind::Tf32 => (g + 8 * (j & 1), t + 4 * (j >> 1)),
        // fp8 (m16n8k32), a_i, i = 4j + e: row g for i < 4 or 8 <= i < 12, else g + 8; col
        // 4t + (i & 3), +16 for i >= 8.
        MmaKind::E4M3 | MmaKind::E5M2 => {
            let i = 4 * j + e;
            let row = if i < 4 || (8..12).contains(&i) {
                g
            } else {
                g + 8
            };
            (row, 4 * t + (i & 3) + if i >= 8 { 16 } else { 0 })
        }
    }
}

fn isa_b(kind: MmaKind, lane: u32, j: u32, e: u32) -> (u32, u32) {
    let (g, t) = (lane / 4, lane % 4);
    match kind {
        // b_i, i = 2j + e: row 2t + (i & 1), +8 for i >= 2; col g.
        MmaKind::F16 | MmaKind::BF16 => {
            let i = 2 * j + e;
            (2 * t + (i & 1) + if i >= 2 { 8 } else { 0 }, g)
        }
        // tf32: row t for b0, t + 4 for b1; col g.
        MmaKind::Tf32 => (t + 4 * j, g),
        // fp8, b_i, i = 4j + e: row 4t + (i & 3), +16 for i >= 4; col g.
        MmaKind::E4M3 | MmaKind::E5M2 => {
            let i = 4 * j + e;
            (4 * t + (i & 3) + if i >= 4 { 16 } else { 0 }, g)
        }
    }
}

fn isa_c(lane: u32, j: u32) -> (u32, u32) {
    let (g, t) = (lane / 4, lane % 4);
    (g + 8 * (j >> 1), 2 * t + (j & 1))
}

struct Case {
    kind: MmaKind,
    m: u32,
    n: u32,
    k: u32,
    warps: u32,
    chained: bool,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for kind in KINDS {
        for &(m, n, k) in &[
            (16, 16, 16),
            (16, 128, 32),
            (32, 16, 64),
            (64, 64, 16),
            (128, 64, 64),
            (128, 128, 32),
            (64, 32, 128),
        ] {
            for warps in [1, 4, 8] {
                for chained in [false, true] {
                    out.push(Case {
                        kind,
                        m,
                        n,
                        k,
                        warps,
                        chained,
                    });
                }
            }
        }
    }
    out
}

fn shape(r: u32, c: u32) -> Shape {
    Shape::new(&[r as usize, c as usize]).unwrap()
}

/// Warp coordinates (along M, along N) of warp `w`, from the accumulator layout's warp strides.
fn warp_coords(acc: &Layout, w: u32) -> [u32; 2] {
    let ws = acc.warp_strides();
    [(w / ws[0]) % acc.wpc[0], (w / ws[1]) % acc.wpc[1]]
}

#[test]
fn fragments_match_the_ptx_isa() {
    for cs in cases() {
        let (wm, wn) = ml::warps_for(cs.m, cs.n, cs.warps, cs.chained);
        assert_eq!(wm * wn, cs.warps);
        let acc = ml::accumulator(wm, wn);
        let la = ml::operand_a(cs.kind, wm);
        let lb = ml::operand_b(cs.kind, wn);
        let ga = la.geometry(&shape(cs.m, cs.k));
        let gb = lb.geometry(&shape(cs.k, cs.n));
        let gc = acc.geometry(&shape(cs.m, cs.n));
        let (tiles_m, tiles_n) = (gc.n[0] / 2, gc.n[1] / 2);
        assert_eq!(ga.n[0], gc.n[0]);
        assert_eq!(gb.n[1], tiles_n);
        let ks = cs.kind.k_step();
        let kw = cs.kind.k_width();
        let mut covered: HashMap<(u32, u32), u32> = HashMap::new();
        for w in 0..cs.warps {
            let [wm_i, wn_i] = warp_coords(&acc, w);
            for rm in 0..tiles_m {
                for rn in 0..tiles_n {
                    // The tile origin: where lane 0's c0 sits.
                    let o = element(
                        &acc,
                        [cs.m, cs.n],
                        0,
                        [wm_i, wn_i],
                        ml::c_counters(rm, rn, 0),
                    );
                    assert_eq!(o[0] % 16, 0);
                    assert_eq!(o[1] % 8, 0);
                    for lane in 0..32 {
                        for j in 0..4u32 {
                            let at = element(
                                &acc,
                                [cs.m, cs.n],
                                lane,
                                [wm_i, wn_i],
                                ml::c_counters(rm, rn, j as usize),
                            );
                            let (r, c) = isa_c(lane, j);
                            assert_eq!(at, [o[0] + r, o[1] + c], "C lane {lane} c{j}");
                            *covered.entry((at[0], at[1])).or_default() += 1;
                        }
                        for kk in 0..cs.k / ks {
                            for j in 0..4u32 {
                                for e in 0..kw {
                                    let cnt = ml::a_counters(
                                        cs.kind,
                                        rm,
                                        kk as usize,
                                        j as usize,
                                        e as usize,
                                    );
                                    assert!(cnt[1] < ga.n[1]);
                                    let at = element(&la, [cs.m, cs.k], lane, [wm_i, 0], cnt);
                                    let (r, c) = isa_a(cs.kind, lane, j, e);
                                    assert_eq!(at, [o[0] + r, kk * ks + c], "A lane {lane}");
                                }
                            }
                            for j in 0..2u32 {
                                for e in 0..kw {
                                    let cnt = ml::b_counters(
                                        cs.kind,
                                        rn,
                                        kk as usize,
                                        j as usize,
                                        e as usize,
                                    );
                                    let at = element(&lb, [cs.k, cs.n], lane, [0, wn_i], cnt);
                                    let (r, c) = isa_b(cs.kind, lane, j, e);
                                    assert_eq!(at, [kk * ks + r, o[1] + c], "B lane {lane}");
                                }
                            }
                        }
                    }
                }
            }
        }
        // Every output element is computed, each by the same number of warps.
        assert_eq!(covered.len() as u32, cs.m * cs.n);
        let copies: HashSet<u32> = covered.values().copied().collect();
        assert_eq!(copies.len(), 1, "uneven replication");
        let copies = *copies.iter().next().unwrap();
        assert_eq!(copies * cs.m * cs.n, cs.warps * 32 * gc.count as u32);
    }
}

#[test]
fn accumulator_is_the_next_dots_a_operand_with_one_warp_along_n() {
    for warps in [1, 2, 4, 8] {
        let (wm, wn) = ml::warps_for(128, 64, warps, true);
        assert_eq!((wm, wn), (warps, 1));
        assert_eq!(ml::accumulator(wm, 1), ml::operand_a(MmaKind::BF16, wm));
        assert_eq!(ml::accumulator(wm, 1), ml::operand_a(MmaKind::F16, wm));
    }
    // Not for tf32 (one element per register) or with warps along N.
    assert_ne!(ml::accumulator(4, 1), ml::operand_a(MmaKind::Tf32, 4));
    assert_ne!(ml::accumulator(4, 2), ml::operand_a(MmaKind::F16, 4));
    // Balanced warps for plain dots.
    assert_eq!(ml::warps_for(128, 128, 8, false), (2, 4));
    assert_eq!(ml::warps_for(16, 16, 4, false), (2, 2));
}

#[test]
fn swizzle_is_a_permutation_and_the_lowerings_formula() {
    for row_bytes in [32u32, 64, 128, 256, 512] {
        let sw = Swizzle::for_row_bytes(row_bytes);
        let rows = 64;
        let mut seen = HashSet::new();
        for r in 0..rows {
            for b in 0..row_bytes {
                let o = sw.offset(r, b);
                assert!(o < rows * row_bytes);
                assert!(seen.insert(o));
                // The lowering computes row * row_bytes + (byte ^ (phase << 4)).
                assert_eq!(o, r * row_bytes + (b ^ (sw.phase(r) << 4)));
                // ... with the row split as 8-row groups and bytes as 128-byte groups.
                let (rlo, blo) = (r % 8, b % 128);
                let split = (rlo * row_bytes + ((b - b % 128 + blo) ^ (sw.phase(rlo) << 4)))
                    + (r - rlo) * row_bytes;
                assert_eq!(o, split);
            }
        }
    }
}

/// Stage configurations the lowering produces for a case: A and B, each K-major or not
/// (tf32 and fp8: always K-major).
fn stages(cs: &Case) -> Vec<Stage> {
    let mut out = Vec::new();
    for role in [Role::A, Role::B] {
        for k_major in [true, false] {
            if !k_major && !cs.kind.transposable() {
                continue;
            }
            let outer = if role == Role::A { cs.m } else { cs.n };
            let (rows, cols) = if k_major {
                (outer, cs.k)
            } else {
                (cs.k, outer)
            };
            out.push(Stage {
                role,
                kind: cs.kind,
                rows,
                cols,
                k_major,
                offset: 1024,
                panel_major: false,
            });
            // Rows wider than 128 bytes as wgmma stores them: panels of 128-byte rows.
            let row_bytes = cols * cs.kind.elem_bytes();
            if row_bytes > 128 && row_bytes.is_multiple_of(128) {
                let last = *out.last().expect("just pushed");
                out.push(Stage {
                    panel_major: true,
                    ..last
                });
            }
        }
    }
    out
}

#[test]
fn ldmatrix_from_the_swizzled_stage_delivers_the_fragments() {
    for cs in cases() {
        let (wm, wn) = ml::warps_for(cs.m, cs.n, cs.warps, cs.chained);
        let acc = ml::accumulator(wm, wn);
        let gc = acc.geometry(&shape(cs.m, cs.n));
        let es = cs.kind.elem_bytes();
        let ks = cs.kind.k_step();
        for st in stages(&cs) {
            // Shared memory: byte address -> (operand row, operand col, byte within element).
            let (or, oc) = match st.role {
                Role::A => (cs.m, cs.k),
                Role::B => (cs.k, cs.n),
            };
            let mut smem: HashMap<u32, (u32, u32, u32)> = HashMap::new();
            for r in 0..or {
                for c in 0..oc {
                    // Stored coordinates: K is the stored column when k_major.
                    let (k, outer) = if st.role == Role::A { (c, r) } else { (r, c) };
                    let (sr, sc) = if st.k_major { (outer, k) } else { (k, outer) };
                    for byte in 0..es {
                        let a = st.offset + st.stored_offset(sr, sc * es + byte);
                        assert!(a >= st.offset && a < st.offset + st.bytes());
                        assert!(smem.insert(a, (r, c, byte)).is_none(), "collision");
                    }
                }
            }
            let read = |a: u32| -> (u32, u32) {
                let (r, c, byte) = smem[&a];
                assert_eq!(byte, 0, "misaligned element read");
                (r, c)
            };
            let tiles = match st.role {
                Role::A => gc.n[0] / 2,
                Role::B => gc.n[1] / 2,
            };
            for w in 0..cs.warps {
                let [wmi, wni] = warp_coords(&acc, w);
                let m_or_n = if st.role == Role::A { cs.m } else { cs.n };
                let warp = st.warp_term(wmi, wni, m_or_n);
                let step = if st.role == Role::A { 1 } else { 2 };
                for tile in (0..tiles).step_by(step) {
                    let outer = match st.role {
                        Role::A => tile as u32 * 16 * wm,
                        Role::B => tile as u32 * 8 * wn,
                    };
                    // Matrices of this load: B loads one n-tile (x2) when it is the last.
                    let mats = if st.role == Role::B && tile + 1 >= tiles {
                        2
                    } else {
                        4
                    };
                    for kk in 0..cs.k / ks {
                        let instr = st.instr_term(outer, kk);
                        let addrs: Vec<u32> = (0..32)
                            .map(|lane| {
                                let lt = st.lane_term(wn, lane);
                                let a = st.ldmatrix_address(lt, warp, instr);
                                let (reg, imm) = st.split_address(lt, warp, instr);
                                assert_eq!(reg + imm, a);
                                assert_eq!(a % 16, 0);
                                a
                            })
                            .collect();
                        // No bank conflicts: each matrix's 8 rows hit 8 different 16-byte bank groups.
                        for m in 0..mats {
                            let groups: HashSet<u32> =
                                (0..8).map(|r| (addrs[8 * m + r] / 16) % 8).collect();
                            assert_eq!(groups.len(), 8, "bank conflict");
                        }
                        // Origin of the warp's tile in operand coordinates.
                        let o = element(
                            &acc,
                            [cs.m, cs.n],
                            0,
                            [wmi, wni],
                            ml::c_counters(
                                if st.role == Role::A { tile } else { 0 },
                                if st.role == Role::B { tile } else { 0 },
                                0,
                            ),
                        );
                        for lane in 0..32u32 {
                            for j in 0..mats as u32 {
                                // (tile offset, fragment register) of matrix j.
                                let (tile_off, fj) = match st.role {
                                    Role::A => (0, j),
                                    Role::B => (j >> 1, j & 1),
                                };
                                let kw = cs.kind.k_width();
                                for e in 0..kw {
                                    // Without .trans lane l gets bytes 4 (l % 4).. of
                                    // row l / 4 (kw elements of es bytes).
                                    let got = if st.k_major {
                                        read(
                                            addrs[(8 * j + lane / 4) as usize]
                                                + 4 * (lane % 4)
                                                + es * e,
                                        )
                                    } else {
                                        read(
                                            addrs[(8 * j + 2 * (lane % 4) + e) as usize]
                                                + 2 * (lane / 4),
                                        )
                                    };
                                    let want = match st.role {
                                        Role::A => {
                                            let (r, c) = isa_a(cs.kind, lane, fj, e);
                                            (o[0] + r, kk * ks + c)
                                        }
                                        Role::B => {
                                            let (r, c) = isa_b(cs.kind, lane, fj, e);
                                            (kk * ks + r, o[1] + tile_off * 8 * wn + c)
                                        }
                                    };
                                    assert_eq!(got, want, "{:?} lane {lane} mat {j}", st);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
