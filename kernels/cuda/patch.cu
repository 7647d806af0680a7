/* Images [B, C, H, W] to patch tokens and back (see kernels/cpu/patch.c for the two token
 * orders): one thread per pixel, image reads or writes coalesced, the token side gathered or
 * scattered through cohort_patch_offset (kernels/math-inline.h), as on the CPU. */
#include "cuda.cuh"
#include "kernels/math-inline.h"

__global__ static void patch_kernel(float *dst, const float *src, int C, int H, int W, int p,
                                    int channel_last, int to_tokens, size_t n)
{
  int gw = W / p, T = (H / p) * gw;
  COHORT_GRID_STRIDE(i, n)
  {
    int x = (int)(i % W), y = (int)(i / W % H);
    size_t bc = i / ((size_t)W * H);
    size_t k = cohort_patch_offset((int)(bc / C), (int)(bc % C), y, x, C, p, gw, T, channel_last);
    if (to_tokens)
      dst[k] = src[i];
    else
      dst[i] = src[k];
  }
}

/* to_tokens: dst holds tokens and src the image; else the reverse. */
static void patch_map(float *dst, const float *src, int B, int C, int H, int W, int p,
                      int channel_last, int to_tokens, const char *op)
{
  if (B <= 0 || C <= 0 || p <= 0 || H <= 0 || W <= 0 || H % p || W % p) {
    cohort_cuda_fail("cuda: %s: shape B=%d C=%d H=%d W=%d p=%d is invalid (H and W must be "
                     "positive multiples of the patch size p)",
                     op, B, C, H, W, p);
    return;
  }
  size_t n = (size_t)B * C * H * W;
  patch_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(dst, src, C, H, W, p, channel_last, to_tokens,
                                                    n);
  cohort_cuda_launched(op);
}

void cohort_cuda_patchify(float *out, const float *img, int B, int C, int H, int W, int p)
{
  patch_map(out, img, B, C, H, W, p, 0, 1, "patchify");
}

void cohort_cuda_patchify_backward(float *dimg, const float *dtokens, int B, int C, int H, int W,
                                   int p)
{
  patch_map(dimg, dtokens, B, C, H, W, p, 0, 0, "patchify_backward");
}

void cohort_cuda_unpatchify(float *img, const float *tokens, int B, int C, int H, int W, int p)
{
  patch_map(img, tokens, B, C, H, W, p, 1, 0, "unpatchify");
}

void cohort_cuda_unpatchify_backward(float *dtokens, const float *dimg, int B, int C, int H, int W,
                                     int p)
{
  patch_map(dtokens, dimg, B, C, H, W, p, 1, 1, "unpatchify_backward");
}
