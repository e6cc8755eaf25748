//! `TEGULA_CHECK_RACES` takes the usual spellings of a boolean (`true` must not leave the
//! check off silently), and the switch it sets turns the interpreter's race check on.

use tegula::prelude::*;
use tegula::Error;
use tegula_interp::InterpError;

/// Every program writes element 0.
#[tegula::kernel]
fn all_write_zero(out: Ptr<i32>) {
    store_unmasked(out, program_id(0));
}

fn races_reported(check: bool) -> bool {
    let dev = Device::cpu();
    dev.set_check_races(check);
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
        // Not a boolean: the default (off), with a warning.
        ("ture", false),
    ] {
        let settings = tegula::env::Settings::from_lookup(|name| {
            (name == "TEGULA_CHECK_RACES").then(|| value.to_string())
        });
        assert_eq!(settings.check_races, on, "TEGULA_CHECK_RACES={value:?}");
        assert_eq!(settings.warnings.len(), usize::from(value == "ture"));
        assert_eq!(races_reported(settings.check_races), on);
    }
}
