//! What a launch asks of the compiler: warps, pipeline depth and the tensor-core instruction
//! family. The plan honours them where it can and says in its [`crate::Report`] where it did
//! not, and why.

/// Which tensor-core instructions `dot`s may run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MmaChoice {
    /// The compiler's choice: Hopper's `wgmma` for every dot the plan can place on it (sm_90a,
    /// f16/bf16, operands in pipeline slots or registers), `mma.sync` for the others.
    #[default]
    Auto,
    /// `mma.sync` (and `ldmatrix`) only.
    Sync,
    /// `wgmma` wherever the plan can place it, as [`MmaChoice::Auto`]: a held choice, so a
    /// tuner keeps it apart from `Sync`.
    Wgmma,
}

impl MmaChoice {
    /// Whether the plan may put a dot on `wgmma` (on a target that has it).
    pub fn allows_wgmma(self) -> bool {
        self != MmaChoice::Sync
    }

    /// `auto`, `sync` or `wgmma`.
    pub fn name(self) -> &'static str {
        match self {
            MmaChoice::Auto => "auto",
            MmaChoice::Sync => "sync",
            MmaChoice::Wgmma => "wgmma",
        }
    }

    /// Parses [`MmaChoice::name`]'s words (case-insensitive).
    pub fn parse(text: &str) -> Option<MmaChoice> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(MmaChoice::Auto),
            "sync" | "mma.sync" | "mma" => Some(MmaChoice::Sync),
            "wgmma" => Some(MmaChoice::Wgmma),
            _ => None,
        }
    }
}

impl std::fmt::Display for MmaChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Launch configuration the code is specialized for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Warps per program: a power of two from 1 to 32.
    pub num_warps: u32,
    /// Pipelining depth: loops whose loads feed tensor-core dots keep up to `num_stages`
    /// shared buffers in flight (`cp.async`); 1 turns it off. A loop's own
    /// `range(..).num_stages(s)` takes precedence.
    pub num_stages: u32,
    /// The tensor-core instruction family.
    pub mma: MmaChoice,
    /// Whether ptxas may contract a float multiply and an add into one fused multiply-add
    /// (one rounding instead of two), as Triton's `enable_fp_fusion` lets it by default. Off,
    /// every add, subtract and multiply rounds on its own, as on the interpreter.
    pub fp_fusion: bool,
    /// Tensor-descriptor accesses outside loops (stores, and loads before or after a loop) may
    /// move on the tensor memory accelerator where the plan's rule allows
    /// (`plan/descriptors.rs`); off, they are masked loads and stores. Off by default until
    /// the copies' shared-memory staging is swizzled: unswizzled, an accumulator's epilogue
    /// through a TMA store has 8-way bank conflicts and measured slower than direct stores
    /// (BENCHMARKS.md, "Tensor descriptors on TMA"). Loads inside loops that a loop's
    /// pipeline streams fill its slots by TMA either way (rule *TMA slots*: swizzled as the
    /// slots are, no thread copies).
    pub tma: bool,
}

impl Default for CompileOptions {
    /// 4 warps, 3 stages (as a launch's default), the compiler's choice of tensor-core
    /// instructions.
    fn default() -> Self {
        CompileOptions {
            num_warps: 4,
            num_stages: 3,
            mma: MmaChoice::Auto,
            fp_fusion: true,
            tma: false,
        }
    }
}
