/*
dev/pytorch_ref.h: reads the files dev/pytorch_ref.py writes (PyTorch's inputs, outputs
and gradients for one op) and compares a result with them. Host code only: the labs
and tests/test_ops_vs_pytorch.cpp include it.

A file holds named tensors, "<precision>/<case>/<name>" (precision fp32 or bf16, case
0, 1, ...), each kept here as doubles whatever its stored type. The comparison is the
relative L2 error ||ours - theirs|| / ||theirs||, with the largest element difference
printed beside it, so a failure shows how far off and where. Tolerances against these files
(tests/test_ops_vs_pytorch.cpp argues them): fp32 builds 1e-5 against float64; bf16 builds
1e-2 against float64 on the same bf16 inputs and 2e-2 against PyTorch's own bf16.
*/
#pragma once
// defines: RefTensor, RefFile, read_ref_file, relative_error, check_close, check_against_pytorch, as_double,
//          REF_TOL, REF_TORCH_BF16_TOL
#include <math.h>    // defines: sqrt, fabs
#include <stdint.h>  // defines: int32_t, int64_t
#include <stdio.h>   // defines: printf
#include <string.h>  // defines: memcmp
#include <string>    // defines: std::string
#include <vector>    // defines: std::vector
#include "../base.h"  // defines: fail, read_whole_file

struct RefTensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<double> values;
    // the values converted to T (float, floatX or int): an op's input as the code under test takes it
    template <typename T, typename Convert>
    std::vector<T> as(Convert convert) const {
        std::vector<T> out(values.size());
        for (size_t i = 0; i < values.size(); i++) out[i] = convert(values[i]);
        return out;
    }
    std::vector<int> as_ints() const { return as<int>([](double d) { return (int)d; }); }
};

struct RefFile {
    std::string path;
    std::vector<RefTensor> tensors;
    const RefTensor& get(const std::string& name) const {
        for (const RefTensor& t : tensors)
            if (t.name == name) return t;
        fail("%s has no tensor %s (made by an older dev/pytorch_ref.py?)", path.c_str(), name.c_str());
    }
    bool has(const std::string& name) const {
        for (const RefTensor& t : tensors)
            if (t.name == name) return true;
        return false;
    }
    // how many cases the file holds for a precision: "<precision>/0/sizes", "<precision>/1/sizes", ...
    int cases(const std::string& precision) const {
        int n = 0;
        while (has(precision + "/" + std::to_string(n) + "/sizes")) n++;
        return n;
    }
};

inline RefFile read_ref_file(const std::string& path) {
    std::string bytes = read_whole_file(path.c_str(), " (run dev/pytorch_ref.py to make it)");
    RefFile file{path, {}};
    size_t at = 0;
    auto take = [&](void* dst, size_t n) {
        if (at + n > bytes.size()) fail("%s is truncated", path.c_str());
        memcpy(dst, bytes.data() + at, n);
        at += n;
    };
    char magic[8];
    take(magic, 8);
    if (memcmp(magic, "OPREF001", 8) != 0) fail("%s is not a dev/pytorch_ref.py file", path.c_str());
    int32_t count;
    take(&count, 4);
    for (int32_t i = 0; i < count; i++) {
        RefTensor t;
        int32_t name_length, dtype, ndim;
        take(&name_length, 4);
        t.name.resize(name_length);
        take(&t.name[0], name_length);
        take(&dtype, 4);
        take(&ndim, 4);
        t.shape.resize(ndim);
        size_t n = 1;
        for (int32_t d = 0; d < ndim; d++) { take(&t.shape[d], 8); n *= (size_t)t.shape[d]; }
        t.values.resize(n);
        for (size_t k = 0; k < n; k++) {
            if (dtype == 0) { double v; take(&v, 8); t.values[k] = v; }
            else if (dtype == 1) { float v; take(&v, 4); t.values[k] = v; }
            else if (dtype == 2) { int32_t v; take(&v, 4); t.values[k] = v; }
            else fail("%s: tensor %s has unknown dtype %d", path.c_str(), t.name.c_str(), dtype);
        }
        file.tensors.push_back(t);
    }
    return file;
}

// ||ours - theirs|| / ||theirs|| over n elements; ours is read through to_double
template <typename T, typename ToDouble>
inline double relative_error(const T* ours, const std::vector<double>& theirs, ToDouble to_double,
                             double* max_abs_diff = nullptr, size_t* worst = nullptr) {
    double diff2 = 0.0, ref2 = 0.0, max_diff = 0.0;
    size_t worst_at = 0;
    for (size_t i = 0; i < theirs.size(); i++) {
        double d = to_double(ours[i]) - theirs[i];
        if (!(fabs(d) <= max_diff)) { max_diff = fabs(d); worst_at = i; }  // a NaN is the worst
        diff2 += d * d;
        ref2 += theirs[i] * theirs[i];
    }
    if (max_abs_diff) *max_abs_diff = max_diff;
    if (worst) *worst = worst_at;
    return ref2 > 0.0 ? sqrt(diff2 / ref2) : sqrt(diff2);
}

// prints one line, "ok" or "MISMATCH" (quiet: only a mismatch), and returns whether ours is
// within tol of theirs; *error (if given) receives the relative error
template <typename T, typename ToDouble>
inline bool check_close(const char* what, const T* ours, const RefTensor& theirs, double tol, ToDouble to_double,
                        bool quiet = false, double* error = nullptr) {
    double max_diff;
    size_t worst;
    double err = relative_error(ours, theirs.values, to_double, &max_diff, &worst);
    bool ok = err <= tol;  // false for NaN
    if (error) *error = err;
    if (quiet && ok) return true;
    printf("    %-28s rel err %.2e (tol %.0e), max |diff| %.2e at %zu: %s\n", what, err, tol, max_diff, worst,
           ok ? "ok" : "MISMATCH");
    return ok;
}

static const double REF_TOL = FLOATX_IS_FP32 ? 1e-5 : 1e-2, REF_TORCH_BF16_TOL = 2e-2;

// a stored value as a double: floatX (bf16, fp16), fp32 statistics, float64
inline double as_double(double x) { return x; }
inline double as_double(float x) { return x; }
#if !FLOATX_IS_FP32
inline double as_double(floatX x) { return to_float(x); }
#endif

// an op's output (host memory) against the file's NAME: an fp32 build, float64 at REF_TOL; a
// bf16 build, float64 on the same bf16 inputs (NAME_f64, where the file has it) at REF_TOL and
// PyTorch's own bf16 at REF_TORCH_BF16_TOL. Prints a line per comparison
template <typename T>
inline bool check_against_pytorch(const char* what, const T* ours, const RefFile& file, const std::string& name) {
    auto value = [](T x) { return as_double(x); };
    const RefTensor& theirs = file.get(name);
    if (FLOATX_IS_FP32 || !file.has(name + "_f64")) return check_close(what, ours, theirs, REF_TOL, value);
    bool exact = check_close((std::string(what) + " vs f64").c_str(), ours, file.get(name + "_f64"), REF_TOL, value);
    bool torch = check_close((std::string(what) + " vs torch bf16").c_str(), ours, theirs, REF_TORCH_BF16_TOL, value);
    return exact && torch;
}
