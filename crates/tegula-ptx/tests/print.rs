//! `device_print` on the GPU: the emitted `vprintf` calls, checked three ways. ptxas accepts
//! the PTX (sm_80 and sm_90a) over dtypes, shapes and warp counts; the format string and the
//! argument buffer follow the C varargs rules; and a small evaluator runs each thread's PTX
//! (integer instructions and forward branches only) to check that every element of a tile is
//! printed exactly once, with its index.

use std::collections::HashMap;
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};

fn ptx(k: &Kernel, sm: u32, warps: u32) -> String {
    let opts = CompileOptions {
        num_warps: warps,
        num_stages: 1,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    compile(k, &Target { sm }, &opts).unwrap().ptx
}

/// Prints `arange(0, n)` as i32: the value of each element is its index.
fn print_arange(n: usize) -> Kernel {
    trace("print_arange", |_p| {
        device_print("v:", &[arange(0, n as i64)]);
    })
    .unwrap()
}

/// Prints an `rows x cols` tile whose value at (i, j) is `i * cols + j`.
fn print_grid(rows: usize, cols: usize) -> Kernel {
    trace("print_grid", |_p| {
        let r = arange(0, rows as i64).col();
        let c = arange(0, cols as i64).row();
        device_print("g", &[r * cols as i64 + c]);
    })
    .unwrap()
}

/// Loads a tile of `dt` and prints it beside the program id and its sum (scalars: on the same
/// line), then beside a tile of another shape (each on lines of its own).
fn print_loaded(dt: DType, n: usize) -> Kernel {
    trace("print_loaded", |p| {
        let x = p.ptr("x", dt);
        let v = load_unmasked(x + program_id(0) * n as i64 + arange(0, n as i64));
        let total = sum(v.cast(DType::F32), 0);
        device_print("x=", &[v, program_id(0)]);
        device_print("both", &[v, total]);
        device_print("two", &[v, arange(0, 16)]);
    })
    .unwrap()
}

/// `print_loaded`'s first line with `hex`: the bits of a loaded tile of `dt` and the program id.
fn print_loaded_hex(dt: DType, n: usize) -> Kernel {
    trace("print_loaded_hex", |p| {
        let x = p.ptr("x", dt);
        let v = load_unmasked(x + program_id(0) * n as i64 + arange(0, n as i64));
        device_print_hex("x=", &[v, program_id(0)]);
    })
    .unwrap()
}

/// Prints inside a loop, a 2-D loaded tile and a comparison (i1).
fn print_in_loop() -> Kernel {
    trace("print_in_loop", |p| {
        let x = p.ptr("x", DType::F16);
        let r = arange(0, 8).col();
        let c = arange(0, 16).row();
        let v = load_unmasked(x + r * 16 + c);
        for_range(0, 3, 1, (), |i, ()| {
            device_print("it", &[i, v, v.to::<f32>().gt(0.5f32)]);
        });
        device_print("", &[]);
    })
    .unwrap()
}

/// ptxas (see `tegula_ptx::ptxas::find`); missing is a failure, never a silent pass.
fn find_ptxas() -> std::path::PathBuf {
    tegula_ptx::ptxas::find()
        .expect("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test")
}

#[test]
fn printing_kernels_assemble_for_sm80_and_sm90a() {
    let ptxas = find_ptxas();
    let dir = std::env::temp_dir().join(format!("tegula-print-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut kernels: Vec<(String, Kernel)> = vec![
        ("arange_64".into(), print_arange(64)),
        ("arange_1024".into(), print_arange(1024)),
        ("grid_16x32".into(), print_grid(16, 32)),
        ("grid_4x8".into(), print_grid(4, 8)),
        ("in_loop".into(), print_in_loop()),
    ];
    for dt in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::U8,
        DType::I16,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
    ] {
        kernels.push((format!("loaded_{dt}_256"), print_loaded(dt, 256)));
        kernels.push((format!("loaded_hex_{dt}_256"), print_loaded_hex(dt, 256)));
        kernels.push((format!("loaded_{dt}_32"), print_loaded(dt, 32)));
    }
    for (name, k) in &kernels {
        for sm in [80, 90] {
            for warps in [1, 4] {
                let p = ptx(k, sm, warps);
                let stem = format!("{name}_sm{sm}_w{warps}");
                let a = tegula_ptx::ptxas::assemble(&ptxas, &p, sm, &dir, &stem)
                    .unwrap_or_else(|e| panic!("{stem}: {e}"));
                assert_eq!(a.spill_stores, 0, "{stem}: {}", a.log);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The format strings of a module, decoded from their `.global` byte arrays.
fn format_strings(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter(|l| l.starts_with(".global") && l.contains("_format["))
        .map(|l| {
            let bytes: Vec<u8> = l[l.find('{').unwrap() + 1..l.rfind('}').unwrap()]
                .split(',')
                .map(|b| b.trim().parse().unwrap())
                .collect();
            assert_eq!(bytes.last(), Some(&0), "not NUL-terminated: {l}");
            String::from_utf8(bytes[..bytes.len() - 1].to_vec()).unwrap()
        })
        .collect()
}

#[test]
fn format_strings_follow_the_varargs_promotions() {
    let p = ptx(&print_loaded(DType::F16, 256), 90, 4);
    assert!(p.contains(
        ".extern .func (.param .b32 func_retval0) vprintf (.param .b64 format, .param .b64 args);"
    ));
    assert_eq!(
        format_strings(&p),
        [
            "pid (%u, %u, %u) idx (%d) x= %.5g %d\n",
            "pid (%u, %u, %u) idx (%d) both %.5g %.9g\n",
            "pid (%u, %u, %u) idx (%d) two (operand 0) %.5g\n",
            "pid (%u, %u, %u) idx (%d) two (operand 1) %d\n",
        ]
    );
    // f16 reaches vprintf as a double in an 8-byte aligned slot after the 4-byte pid and index.
    assert!(p.contains("cvt.f64.f32"), "{p}");
    assert!(p.contains("st.local.f64 [tg_print"), "{p}");
    let p = ptx(&print_loaded(DType::I64, 32), 80, 1);
    assert_eq!(
        format_strings(&p)[0],
        "pid (%u, %u, %u) idx (%d) x= %lld %d\n"
    );
    assert!(p.contains("st.local.u64 [tg_print"), "{p}");
    let p = ptx(&print_in_loop(), 80, 4);
    assert_eq!(
        format_strings(&p),
        [
            "pid (%u, %u, %u) idx (%d, %d) it %d %.5g %d\n",
            "pid (%u, %u, %u)\n"
        ]
    );
    // A prefix with `%` in it is printed as is.
    let k = trace("percent", |_p| device_print("100%", &[program_id(0)])).unwrap();
    assert_eq!(
        format_strings(&ptx(&k, 80, 4)),
        ["pid (%u, %u, %u) 100%% %d\n"]
    );
}

/// One `vprintf` call seen by the evaluator: the argument buffer's 32-bit words.
type Call = Vec<i64>;

/// Runs thread `tid`'s PTX over the integer instructions the print lowering and `arange` use
/// (forward branches only) and returns the argument words of each `vprintf` call.
fn run_thread(ptx: &str, tid: i64) -> Vec<Call> {
    let body: Vec<&str> = ptx
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("mov.u32 %r1, %tid.x"))
        .collect();
    let mut regs: HashMap<String, i64> = HashMap::new();
    let mut buf: HashMap<i64, i64> = HashMap::new();
    let mut calls = Vec::new();
    let mut skipping_to: Option<String> = None;
    for line in body {
        if let Some(l) = &skipping_to {
            if line.trim_end_matches(':') == l {
                skipping_to = None;
            }
            continue;
        }
        if line.ends_with(':') || line == "}" || line.starts_with("ret;") || line.starts_with("//")
        {
            continue;
        }
        let line = line.trim_end_matches(';');
        let (guard, line) = match line.strip_prefix('@') {
            Some(rest) => {
                let (g, l) = rest.split_once(' ').unwrap();
                let (neg, p) = match g.strip_prefix('!') {
                    Some(p) => (true, p),
                    None => (false, g),
                };
                (Some((regs[p] != 0) != neg), l)
            }
            None => (None, line),
        };
        let (op, args) = line.split_once(' ').unwrap_or((line, ""));
        let a: Vec<&str> = args.split(", ").map(str::trim).collect();
        let val = |s: &str| -> i64 {
            if let Some(v) = regs.get(s) {
                *v
            } else if s == "%tid.x" {
                tid
            } else if s.starts_with("%ctaid") {
                7
            } else {
                s.parse()
                    .unwrap_or_else(|_| panic!("operand {s} in {line}"))
            }
        };
        let u = |s: &str| val(s) as u32 as i64;
        let r = match op {
            "bra" | "bra.uni" => {
                if guard != Some(false) {
                    skipping_to = Some(a[0].to_string());
                }
                continue;
            }
            "st.local.u32" => {
                let off = a[0]
                    .split('+')
                    .nth(1)
                    .map_or(0, |o| o.trim_end_matches(']').parse().unwrap());
                buf.insert(off, val(a[1]));
                continue;
            }
            "call" => {
                let mut words: Vec<(i64, i64)> = buf.iter().map(|(&k, &v)| (k, v)).collect();
                words.sort();
                calls.push(words.into_iter().map(|(_, v)| v).collect());
                continue;
            }
            "st.param.b64" => continue,
            "mov.u32" | "mov.b32" => val(a[1]),
            "mov.u64" | "cvta.global.u64" | "cvta.local.u64" => 0,
            "and.b32" => val(a[1]) & val(a[2]),
            "or.b32" => val(a[1]) | val(a[2]),
            "shr.u32" => u(a[1]) >> val(a[2]),
            "shl.b32" => (val(a[1]) << val(a[2])) as i32 as i64,
            "add.s32" => (val(a[1]) + val(a[2])) as i32 as i64,
            "mul.lo.s32" => (val(a[1]) * val(a[2])) as i32 as i64,
            "mad.lo.s32" => (val(a[1]) * val(a[2]) + val(a[3])) as i32 as i64,
            "setp.lt.u32" => (u(a[1]) < u(a[2])) as i64,
            "setp.eq.u32" => (u(a[1]) == u(a[2])) as i64,
            "and.pred" => val(a[1]) & val(a[2]),
            other => panic!("the evaluator does not know `{other}` ({line})"),
        };
        if guard != Some(false) {
            regs.insert(a[0].to_string(), r);
        }
    }
    calls
}

/// Every call of every thread: the program id is (7, 7, 7), then the index, then the value.
fn printed(k: &Kernel, warps: u32) -> Vec<Vec<i64>> {
    let p = ptx(k, 80, warps);
    let mut all = Vec::new();
    for tid in 0..32 * warps as i64 {
        for c in run_thread(&p, tid) {
            assert_eq!(c[..3], [7, 7, 7], "program id words: {c:?}");
            all.push(c[3..].to_vec());
        }
    }
    all.sort();
    all
}

#[test]
fn each_element_prints_once_with_its_index() {
    for (n, warps) in [(64, 4), (128, 4), (512, 4), (8, 1), (1024, 8)] {
        let got = printed(&print_arange(n), warps);
        let want: Vec<Vec<i64>> = (0..n as i64).map(|i| vec![i, i]).collect();
        assert_eq!(got, want, "arange {n}, {warps} warps");
    }
    for (rows, cols, warps) in [(16, 32, 4), (4, 8, 4), (32, 4, 2), (1, 64, 4), (64, 128, 8)] {
        let got = printed(&print_grid(rows, cols), warps);
        let mut want = Vec::new();
        for i in 0..rows as i64 {
            for j in 0..cols as i64 {
                want.push(vec![i, j, i * cols as i64 + j]);
            }
        }
        assert_eq!(got, want, "grid {rows}x{cols}, {warps} warps");
    }
}

#[test]
fn a_scalar_prints_from_one_thread() {
    let k = trace("scalar", |_p| device_print("pid", &[program_id(0)])).unwrap();
    let p = ptx(&k, 80, 4);
    let callers: Vec<i64> = (0..128)
        .filter(|&t| !run_thread(&p, t).is_empty())
        .collect();
    assert_eq!(callers, [0]);
}

#[test]
fn hex_prints_bits_zero_padded_to_the_dtypes_width() {
    let line = |dt: DType| {
        let p = ptx(&print_loaded_hex(dt, 256), 90, 4);
        (format_strings(&p)[0].clone(), p)
    };
    let (f, p) = line(DType::F32);
    assert_eq!(f, "pid (%u, %u, %u) idx (%d) x= 0x%08x 0x%08x\n");
    // The float's bits, not its value promoted to a double.
    assert!(p.contains("mov.b32") && !p.contains("cvt.f64.f32"), "{p}");
    let (f, p) = line(DType::F16);
    assert_eq!(f, "pid (%u, %u, %u) idx (%d) x= 0x%04x 0x%08x\n");
    assert!(p.contains("cvt.u32.u16"), "{p}");
    let (f, p) = line(DType::I8);
    assert_eq!(f, "pid (%u, %u, %u) idx (%d) x= 0x%02x 0x%08x\n");
    assert!(p.contains("and.b32") && p.contains(", 255;"), "{p}");
    let (f, p) = line(DType::F64);
    assert_eq!(f, "pid (%u, %u, %u) idx (%d) x= 0x%016llx 0x%08x\n");
    assert!(
        p.contains("mov.b64") && p.contains("st.local.u64 [tg_print"),
        "{p}"
    );
    // The same words reach vprintf as without hex for an i32 tile.
    let k = trace("hex_arange", |_p| device_print_hex("v:", &[arange(0, 64)])).unwrap();
    let want: Vec<Vec<i64>> = (0..64).map(|i| vec![i, i]).collect();
    assert_eq!(printed(&k, 4), want);
}
