//! The GPU architectures the backend emits for, and every hardware number and rule the
//! planning passes read: shared memory per block and per SM, the register file, thread and
//! block limits, which tensor-core instructions exist and the shapes and shared-memory rows
//! they take, and the PTX version of the module. One place, so that nothing above the
//! compiler restates them; what the compiler decided from them is in the plan's
//! [`crate::Report`].

/// The GPU architecture to emit for: `sm` = 80 (A100), 86 (A10, RTX 30), 89 (L4, RTX 40), 90
/// (H100, H200). Other values of 80 and above are read as the nearest of these below them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub sm: u32,
}

/// Registers a thread may hold (ptxas's ceiling); 255 are allocated as 256.
pub const MAX_REGISTERS_PER_THREAD: u32 = 255;

/// 32-bit registers in one SM's register file (every architecture from sm_80 to sm_90).
pub const REGISTERS_PER_SM: u32 = 64 * 1024;

/// Shared memory the hardware keeps for itself per resident block.
pub const SHARED_RESERVED_PER_BLOCK: u32 = 1024;

impl Target {
    /// The target of a device of compute capability `major.minor`: sm_90a for Hopper and newer
    /// (sm_90 code runs on them), the device's own for Ampere and Ada.
    pub fn for_compute_capability(major: u32, minor: u32) -> Target {
        let sm = 10 * major + minor;
        Target {
            sm: if sm >= 90 { 90 } else { sm.max(80) },
        }
    }

    /// `.target` of the module: `sm_90a` on Hopper (needed for wgmma and setmaxnreg).
    pub fn target_name(&self) -> String {
        if self.sm == 90 {
            "sm_90a".into()
        } else {
            format!("sm_{}", self.sm)
        }
    }

    /// `.version` of the module: 8.0 has every instruction used and loads on the H200's driver;
    /// sm_90 modules say 8.1 for the vector `red.global.add.v{2,4}.f32`, sm_89 ones for the
    /// fp8 conversions (`cvt.rn.satfinite.e4m3x2.f32`). Modules with fp8 dots say
    /// [`Target::fp8_dot_ptx_version`].
    pub fn ptx_version(&self) -> &'static str {
        if self.sm >= 89 {
            "8.1"
        } else {
            "8.0"
        }
    }

    /// Shared memory one block may use, opted in to beyond the default 48 KB: 227 KB on
    /// Hopper, 163 KB on A100 (sm_80, sm_87), 99 KB on the other Ampere and Ada parts.
    pub fn max_shared_bytes(&self) -> u32 {
        match self.sm {
            90.. => 227 * 1024,
            80 | 87 => 163 * 1024,
            _ => 99 * 1024,
        }
    }

    /// Shared memory of one SM, the per-block reserve included.
    pub fn shared_bytes_per_sm(&self) -> u32 {
        self.max_shared_bytes() + SHARED_RESERVED_PER_BLOCK
    }

    /// Threads one SM holds at once.
    pub fn max_threads_per_sm(&self) -> u32 {
        match self.sm {
            86 | 89 => 1536,
            _ => 2048,
        }
    }

    /// Blocks one SM holds at once.
    pub fn max_blocks_per_sm(&self) -> u32 {
        match self.sm {
            86 => 16,
            89 => 24,
            _ => 32,
        }
    }

    /// `.version` of a module with fp8 dots on the tensor cores: 8.4, the first with fp8
    /// `mma.sync` (which then needs a CUDA 12.4 driver); kept to those modules so that others
    /// load on older drivers.
    pub fn fp8_dot_ptx_version(&self) -> &'static str {
        "8.4"
    }

    /// Whether `mma.sync` takes fp8 operands (`m16n8k32`, e4m3 and e5m2): sm_89 and newer. Ada
    /// runs it on its fp8 tensor cores; Hopper's ptxas widens the operands to f16 and issues
    /// two f16 mmas (only `wgmma` reaches Hopper's fp8 rate).
    pub fn has_fp8_mma(&self) -> bool {
        self.sm >= 89
    }

    /// Whether Hopper's asynchronous warpgroup MMA (`wgmma.mma_async`) exists.
    pub fn has_wgmma(&self) -> bool {
        self.sm >= 90
    }

    /// Whether a `wgmma` covers an f16/bf16 dot of `m x n x k` over `warps` warps: the warps
    /// form warpgroups of 4 along M, each with 16 rows a warp in every `16 x warps`-row
    /// block, and one instruction covers N (8 to 256, multiples of 8) and 16 of K.
    pub fn wgmma_takes_shape(&self, m: u32, n: u32, k: u32, warps: u32) -> bool {
        self.has_wgmma()
            && warps.is_multiple_of(4)
            && m.is_multiple_of(16 * warps)
            && (8..=256).contains(&n)
            && n.is_multiple_of(8)
            && k.is_multiple_of(16)
    }

    /// Whether `wgmma`'s descriptors read shared-memory rows of `bytes`: 64 (the 64-byte
    /// swizzle) or a multiple of 128 (the 128-byte swizzle, panels past 128).
    pub fn wgmma_reads_rows_of(&self, bytes: u32) -> bool {
        bytes == 64 || (bytes >= 128 && bytes.is_multiple_of(128))
    }

    /// Blocks of `threads` threads that fit on one SM by shared memory (`shared_bytes` a
    /// block) and by the thread and block limits; at least 1.
    pub fn blocks_per_sm_by_shared(&self, shared_bytes: u32, threads: u32) -> u32 {
        let by_shared =
            self.shared_bytes_per_sm() / (shared_bytes + SHARED_RESERVED_PER_BLOCK).max(1);
        by_shared
            .min(self.max_threads_per_sm() / threads.max(1))
            .min(self.max_blocks_per_sm())
            .max(1)
    }

    /// Rule *occupancy step*: the blocks a kernel without dots should declare
    /// (`.minnctapersm`) once ptxas has said that it uses `registers` a thread, `None` to keep
    /// it as it is. Memory-bound kernels run at the rate of the loads their SM keeps in
    /// flight, so one more resident block is worth a tighter register budget, while the SM
    /// holds fewer than half the threads it can: when registers, not shared memory or the
    /// thread and block limits, keep it there, one block more. Whether ptxas fits the tighter
    /// budget without spilling is for the caller to check.
    pub fn occupancy_step(&self, registers: u32, threads: u32, shared_bytes: u32) -> Option<u32> {
        let by_registers = self.blocks_per_sm_by_registers(registers, threads);
        let by_rest = self.blocks_per_sm_by_shared(shared_bytes, threads);
        let resident = by_registers.min(by_rest) * threads;
        (by_registers < by_rest && 2 * resident < self.max_threads_per_sm())
            .then_some(by_registers + 1)
    }

    /// Blocks of `threads` threads whose threads may each hold `registers` registers
    /// (allocated in multiples of 8), from the register file; at least 1.
    pub fn blocks_per_sm_by_registers(&self, registers: u32, threads: u32) -> u32 {
        let per_thread = registers
            .clamp(1, MAX_REGISTERS_PER_THREAD)
            .next_multiple_of(8);
        (REGISTERS_PER_SM / (per_thread * threads.max(1))).max(1)
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.target_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occupancy_step_adds_one_block_while_registers_hold_the_sm_under_half() {
        let h100 = Target { sm: 90 };
        // 72 registers x 256 threads: 3 blocks (768 threads); 4 fit at 64 registers.
        assert_eq!(h100.occupancy_step(72, 256, 0), Some(4));
        // 86 registers: 2 blocks, then 3 (at 85, i.e. 80, registers).
        assert_eq!(h100.occupancy_step(86, 256, 0), Some(3));
        assert_eq!(h100.occupancy_step(200, 256, 0), Some(2));
        // Already half the SM's threads (4 x 256 at 64 registers), or more.
        assert_eq!(h100.occupancy_step(64, 256, 0), None);
        assert_eq!(h100.occupancy_step(30, 128, 0), None);
        // Shared memory, not registers, holds it at 2 blocks.
        assert_eq!(h100.occupancy_step(86, 256, 100 * 1024), None);
        // A 1024-thread block at 64 registers is one block and half the SM: nothing.
        assert_eq!(h100.occupancy_step(64, 1024, 0), None);
        // At 96 registers a 512-thread block is 1 block (of 1536 on sm_86); 2 fit at 64.
        assert_eq!(Target { sm: 86 }.occupancy_step(96, 512, 0), Some(2));
    }
}
