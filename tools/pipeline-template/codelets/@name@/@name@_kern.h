/* Per-element bodies of the @name@ kernels, plain C shared by the CPU kernels and their CUDA twins. */
#ifndef SP_@NAME@_KERN_H
#define SP_@NAME@_KERN_H

/*
 * DESIGN: what a CPU loop and a CUDA thread compute alike lives here once,
 * compiled as plain C for the CPU (scale_cpu.c) and as __host__ __device__
 * for a CUDA twin, so that the two round alike (the project builds with
 * -ffp-contract=off; a device body uses __dmul_rn and its kin) and a test
 * can run the device body on the host.
 */

#ifdef __CUDACC__
#define @NAME@_FN static __host__ __device__ inline
#else
#define @NAME@_FN static inline
#endif

/* One element of y = factor x: one rounded multiplication. */
@NAME@_FN double @name@_scale_one(double x, double factor)
{
	return x * factor;
}

#endif /* SP_@NAME@_KERN_H */
