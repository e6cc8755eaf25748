//! Shared by the math library's tests: errors in units in the last place of f32.

/// The distance from `got` to the exact `want`, in ulps of f32 at `want` (subnormal ulps below
/// the normal range); 0 when both are the same infinity or both NaN, infinite when one is NaN.
pub fn ulps(got: f32, want: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let wf = want as f32;
    if wf.is_infinite() || got.is_infinite() {
        // Past f32's range: the result must be the same infinity (or the largest finite value
        // when the exact value is within half an ulp of it).
        if got == wf {
            return 0.0;
        }
        let top = f32::MAX as f64 * if want < 0.0 { -1.0 } else { 1.0 };
        return (got as f64 - top).abs() / 2f64.powi(104) + 1.0;
    }
    let e = if want == 0.0 {
        -126
    } else {
        want.abs().log2().floor().max(-126.0) as i32
    };
    (got as f64 - want).abs() / 2f64.powi(e - 23)
}
