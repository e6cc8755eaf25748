//! Expansion-time checks: misuse is a `compile_error!` at the user's tokens, and valid bodies
//! expand without one. (Run outside the compiler, on proc-macro2's fallback spans.)

use proc_macro2::{TokenStream, TokenTree};

/// The `compile_error!`s in an expansion as (line, column, message).
fn errors(item: &str) -> Vec<(usize, usize, String)> {
    let item: TokenStream = item.parse().expect("test input tokenizes");
    let out = crate::expand::kernel(TokenStream::new(), item);
    let tokens: Vec<TokenTree> = out.into_iter().collect();
    let mut found = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let TokenTree::Ident(id) = t else { continue };
        if id != "compile_error" {
            continue;
        }
        let Some(TokenTree::Group(g)) = tokens.get(i + 2) else {
            continue;
        };
        let msg = g.stream().to_string();
        let start = id.span().start();
        found.push((start.line, start.column, msg));
    }
    found
}

fn expansion(item: &str) -> String {
    let item: TokenStream = item.parse().expect("test input tokenizes");
    crate::expand::kernel(TokenStream::new(), item).to_string()
}

/// Asserts exactly one error, containing `needle`, on line `line` of the input.
fn assert_error(item: &str, needle: &str, line: usize) {
    let errs = errors(item);
    assert_eq!(errs.len(), 1, "{errs:?}");
    let (l, _, msg) = &errs[0];
    assert!(msg.contains(needle), "{msg}");
    assert_eq!(*l, line, "{msg}");
}

#[test]
fn unsupported_parameter_types() {
    assert_error(
        "fn k(a: Ptr<f32>,\n      v: Vec<f32>) {}",
        "unsupported kernel parameter type",
        2,
    );
    assert_error(
        "fn k(a: Ptr<f32>,\n      #[constexpr] p: Ptr<f32>) {}",
        "a `Ptr` cannot be `#[constexpr]`",
        2,
    );
    assert_error(
        "fn k(a: Ptr<f32>,\n      #[constexpr] d: TensorDescriptor<f32>) {}",
        "a `TensorDescriptor` cannot be `#[constexpr]`",
        2,
    );
    assert_error("fn k(\n  (a, b): (i32, i32)) {}", "plain names", 2);
    assert_error("fn k<'a>(x: Ptr<f32>) {}", "lifetime", 1);
    assert_error("fn k(x: Ptr<f32>) -> i32 { 0 }", "returns nothing", 1);
}

#[test]
fn async_and_unsafe_kernels() {
    assert_error("async fn k(x: Ptr<f32>) {}", "cannot be `async`", 1);
    assert_error("unsafe fn k(x: Ptr<f32>) {}", "cannot be `unsafe`", 1);
}

#[test]
fn return_with_a_value() {
    assert_error(
        "fn k(x: Ptr<f32>) {\n    let a = 1;\n    return a;\n}",
        "may not carry a value",
        3,
    );
    // A plain `return;` ends the trace and is fine.
    assert!(errors("fn k(x: Ptr<f32>) { if BIG { return; } }").is_empty());
}

#[test]
fn jumps_out_of_runtime_loops() {
    let item = "fn k(x: Ptr<f32>, n: i32) {
        for i in range(n) {
            if i.lt(3) {
                break;
            }
        }
    }";
    assert_error(item, "`break` cannot leave a run-time loop", 4);
    let item = "fn k(x: Ptr<f32>, n: i32) {
        for i in range(0, n, 2) {
            continue;
        }
    }";
    assert_error(item, "`continue` cannot leave a run-time loop", 3);
    let item = "fn k(x: Ptr<f32>, n: i32) {
        for i in range(n) {
            for j in range(n) {
                return;
            }
        }
    }";
    // Reported once although two run-time loops enclose it.
    assert_error(item, "`return` cannot leave a run-time loop", 4);
    let item = "fn k(x: Ptr<f32>, n: i32) {
        'outer: for a in static_range(4) {
            for i in range(n) {
                break 'outer;
            }
        }
    }";
    assert_error(item, "`break` cannot leave a run-time loop", 4);
}

#[test]
fn jumps_inside_rust_loops_within_runtime_loops_are_fine() {
    let item = "fn k(x: Ptr<f32>, n: i32) {
        let mut acc = zeros::<f32>([16]);
        for i in range(n) {
            for j in static_range(8) {
                if j == 3 { continue; }
                if j > 5 { break; }
                acc += j as f32;
            }
            let mut k = 0;
            loop { k += 1; if k > 2 { break; } }
            let f = |t: Tile| { return t * 2; };
            acc = f(acc);
        }
    }";
    assert_eq!(errors(item), vec![]);
}

#[test]
fn range_arity() {
    assert_error(
        "fn k(n: i32) {\n  for i in range(0, n, 1, 2) {}\n}",
        "takes 1 to 3 arguments",
        2,
    );
}

#[test]
fn labeled_runtime_loop() {
    assert_error(
        "fn k(n: i32) {\n  'l: for i in range(n) {}\n}",
        "cannot have a label",
        2,
    );
}

#[test]
fn dispatch_choices() {
    // Visibly Rust bools stay plain `if`s; others dispatch on the condition's type.
    let e = expansion("fn k(n: i32, #[constexpr] flag: bool) { if flag && n == n { } }");
    assert!(!e.contains("Condition"), "{e}");
    let e = expansion("fn k(n: i32) { let mut v = n; if n.lt(3) { v = v + 1; } }");
    assert!(e.contains("Condition :: branch"), "{e}");
    assert!(e.contains("Named (\"v\" , v)"), "{e}");
    // An `if` that leaves the kernel must be decided at trace time.
    let e = expansion("fn k(n: i32) { if is_small() { return; } }");
    assert!(e.contains("RustBool :: rust_bool"), "{e}");
    let e = expansion("fn k(n: i32) { let mut i = n; while i.lt(10) { i = i * 2; } }");
    assert!(e.contains("while_any"), "{e}");
    let e = expansion("fn k(n: i32) { let mut i = 0; while i < 10 { i += 1; } }");
    assert!(!e.contains("while_any"), "{e}");
}

#[test]
fn carried_variables_follow_scopes() {
    let e = expansion(
        "fn k(n: i32) {
            let mut a = n; let mut b = n; let c = n;
            for i in range(n) {
                let mut b = a;       // shadows: this `b` is local
                b += 1;
                a += b;
                match 1 { x => { let _ = x; } }
                let f = |a: i32| a;  // a closure parameter named `a`: not an assignment
            }
        }",
    );
    assert!(e.contains("Named (\"a\" , a)"), "{e}");
    assert!(!e.contains("Named (\"b\""), "{e}");
    assert!(!e.contains("Named (\"c\""), "{e}");
}

#[test]
fn range_num_stages() {
    let e = expansion(
        "fn k(n: i32, #[constexpr] s: u32) {
            let mut a = n;
            for i in range(0, n, 2).num_stages(s) { a += i; }
        }",
    );
    assert!(e.contains("for_range_with"), "{e}");
    assert!(e.contains("RangeOptions :: new () . num_stages (s)"), "{e}");
    assert!(e.contains("Named (\"a\" , a)"), "{e}");
    // The two-argument form takes it too; a plain `range` stays `for_range`.
    let e = expansion("fn k(n: i32) { for i in range(1, n).num_stages(3) {} }");
    assert!(e.contains("for_range_with (1 , n , 1"), "{e}");
    let e = expansion("fn k(n: i32) { for i in range(n).loop_unroll_factor(4).num_stages(2) {} }");
    assert!(
        e.contains("RangeOptions :: new () . loop_unroll_factor (4) . num_stages (2)"),
        "{e}"
    );
    let e = expansion("fn k(n: i32) { for i in range(n) {} }");
    assert!(!e.contains("for_range_with"), "{e}");
    assert!(!e.contains("RangeOptions"), "{e}");
}

#[test]
fn range_options_misuse() {
    assert_error(
        "fn k(n: i32) {\n  for i in range(n).unroll(2) {}\n}",
        "is not a loop option",
        2,
    );
    assert_error(
        "fn k(n: i32) {\n  for i in range(n).num_stages(2, 3) {}\n}",
        "`num_stages` takes one argument",
        2,
    );
    assert_error(
        "fn k(n: i32) {\n  for i in range(0, n, 1, 2).num_stages(2) {}\n}",
        "takes 1 to 3 arguments",
        2,
    );
}
