//! `TEGULA_CHECK_RACES` takes the usual spellings of a boolean (it took only `1` before, and
//! `true` left the check off silently). Its own test binary: it sets the variable.

use tegula::prelude::*;
use tegula::Error;
use tegula_interp::InterpError;

/// Every program writes element 0.
#[tegula::kernel]
fn all_write_zero(out: Ptr<i32>) {
    store_unmasked(out, program_id(0));
}

fn races_reported() -> bool {
    let dev = Device::cpu();
    let out = dev.zeros::<i32>([1]).unwrap();
    match all_write_zero::launch(&dev, 4u32, &out) {
        Ok(()) => false,
        Err(Error::Interp(InterpError::Race { .. })) => true,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn the_race_check_switch_reads_every_boolean_spelling() {
    for (value, on) in [
        ("1", true),
        ("true", true),
        ("TRUE", true),
        ("on", true),
        ("Yes", true),
        ("0", false),
        ("false", false),
        ("off", false),
        ("no", false),
        ("", false),
        // Not a boolean: the default (off), with a warning on stderr.
        ("ture", false),
    ] {
        std::env::set_var("TEGULA_CHECK_RACES", value);
        assert_eq!(races_reported(), on, "TEGULA_CHECK_RACES={value:?}");
    }
    std::env::remove_var("TEGULA_CHECK_RACES");
    assert!(!races_reported());
}
