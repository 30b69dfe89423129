// Runs the `fulcrum` binary as a user would: exit status, stderr, stdout and files written.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

namespace {

namespace fs = std::filesystem;

struct Result {
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fulcrum_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result run(const std::string& args) {
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string command = fmt::format("cd '{}' && '{}' {} > '{}' 2> '{}' < /dev/null", FULCRUM_SOURCE_DIR,
                                            FULCRUM_BINARY, args, out.string(), err.string());
    const int raw = std::system(command.c_str());
    Result r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  // `simulate <job>` of the schedule in plan file `file`, at its micro-batch size, takes the `planned` seconds.
  void expect_simulates_as_planned(const std::string& job, const std::string& file, double planned_seconds) {
    const auto plan_file = nlohmann::json::parse(slurp(file));
    const Result sim = run("simulate " + job + " --mbs " + std::to_string(plan_file["plan"]["mbs"].get<int>()) +
                           " --load-schedule " + file + " --json --quiet");
    ASSERT_EQ(sim.status, 0) << sim.err;
    EXPECT_NEAR(nlohmann::json::parse(sim.out)["iteration_seconds"].get<double>(), planned_seconds, 1e-9);
  }

  fs::path dir_;
};

struct BadCase {
  const char* name;
  std::string file_text;  // written to the file named by {file}; empty: no file
  std::string args;       // {file} and {out} are replaced
  std::string message;    // the stderr line must contain it (and the file's name when there is a file)
};

TEST_F(Cli, BadInputTable) {
  const std::string ok = R"([{"vit_num": 5, "token_num": 811, "image_flags": 5}, {"vit_num": 1, "token_num": 300}])";
  const BadCase cases[] = {
      {"malformed_json", R"([{"vit_num": 5, "token_num": 811)", "batch --data {file} --dp 2 --out {out}",
       "record 0: malformed JSON: the file ends inside the record (byte 32)"},
      // Text that is not JSON inside a record, which simdjson finds only as it reads the record: placed at its byte
      // (Python's json module places these two at characters 46 and 65).
      {"malformed_inside_record", R"([{"vit_num": 5, "token_num": 811}, {"vit_num" 1, "token_num": 3}])",
       "batch --data {file} --dp 2 --out {out}", "record 1: malformed JSON at byte 46"},
      {"trailing_comma_in_record", R"([{"vit_num": 5, "token_num": 811}, {"vit_num": 1, "token_num": 3,}])",
       "batch --data {file} --dp 2 --out {out}", "record 1: malformed JSON at byte 65"},
      {"missing_field", R"([{"vit_num": 5, "token_num": 811}, {"vit_num": 1}])", "batch --data {file} --dp 2 --out {out}",
       "record 1: missing field token_num"},
      {"non_integer", R"([{"vit_num": 5.5, "token_num": 811}])", "batch --data {file} --dp 2 --out {out}",
       "record 0: vit_num must be an integer"},
      {"negative_tiles", R"([{"vit_num": -1, "token_num": 811}])", "batch --data {file} --dp 2 --out {out}",
       "record 0: vit_num must be >= 0"},
      {"zero_tokens", R"([{"vit_num": 1, "token_num": 0}])", "batch --data {file} --dp 2 --out {out}",
       "record 0: token_num must be a positive integer"},
      {"negative_tokens", R"([{"vit_num": 1, "token_num": -7}])", "stats --data {file}",
       "record 0: token_num must be a positive integer"},
      {"index_all_missing", R"({"a": {"token_lengths": "nope.json"}, "b": {"token_lengths": "gone.json"}})",
       "batch --data {file} --dp 2 --out {out}", "none of its 2 entries could be loaded"},
      {"dp_zero", ok, "batch --data {file} --dp 0 --out {out}", "--dp must be at least 1"},
      {"cap_below_sample", ok, "batch --data {file} --dp 2 --algo isf --vit-cap 4 --out {out}",
       "sample 0 (5 tiles, 811 tokens) exceeds"},
      {"cap_below_sample_fulcrum", ok, "batch --data {file} --dp 1 --token-cap 500 --out {out}",
       "sample 0 (5 tiles, 811 tokens) exceeds"},
      {"unknown_algo", ok, "batch --data {file} --dp 2 --algo best --out {out}", "unknown batcher 'best'"},
      // Options the run would ignore.
      {"cluster_without_model", ok, "batch --data {file} --dp 2 --cluster h100 --out {out}",
       "--cluster sets the devices of --model's cost: give --model"},
      {"isf_option_under_fulcrum", ok, "batch --data {file} --dp 2 --algo fulcrum --search --out {out}",
       "--search applies to --algo isf (and its --compare rows), not --algo fulcrum"},
      {"algo_with_compare", ok, "batch --data {file} --dp 2 --compare --algo bogus",
       "--algo picks one batcher; --compare runs every one"},
      {"csv_row", "vit_num,token_num\n1,20\n1,x\n", "batch --data {file} --dp 2 --out {out}", "line 3"},
      {"bad_cost", ok, "batch --data {file} --dp 2 --cost {file} --out {out}", "expected a JSON object of coefficients"},
      {"unreadable", "", "batch --data {file} --dp 2 --out {out}", "cannot read"},
      {"unknown_option", ok, "batch --data {file} --dp 2 --frobnicate", "frobnicate"},
      {"unknown_command", "", "bogus --data x", "unknown command 'bogus'; the commands are stats, batch, model"},
      {"drop_last_nothing_left", ok, "batch --data {file} --dp 2 --samples-per-step 4 --drop-last --out {out}",
       "dropping the short last step leaves no step"},
      {"drop_last_nothing_left_isf", ok, "batch --data {file} --dp 4 --algo isf --drop-last --out {out}",
       "dropping the short last step leaves no step: 1 isf groups, 4 per step"},
      {"isf_search_finds_nothing", ok, "batch --data {file} --dp 1 --algo isf --search --samples-per-step 50 --out {out}",
       "the isf cap search found no caps giving 50.0 to 51.0 samples per group"},
      // Patch tokens have no default cap, as tiles have: isf needs one, or the search for one.
      {"isf_patch_tokens_uncapped", R"([{"vision_tokens": 256, "token_num": 300}])",
       "batch --data {file} --dp 1 --algo isf --out {out}",
       "isf on data that counts vision_tokens needs a vision cap: give --vit-cap (patch tokens a micro-batch may hold) "
       "or --search"},
      {"isf_patch_tokens_compare_uncapped", R"([{"vision_tokens": 256, "token_num": 300}])",
       "batch --data {file} --dp 1 --compare --search --quiet",
       "needs a vision cap: give --vit-cap (patch tokens a micro-batch may hold)"},
      {"simulate_isf_patch_tokens_uncapped", R"([{"vision_tokens": 256, "token_num": 300}])",
       "simulate --model data/modelcfg/qwen2_vl_2b_instruct.config.json --cluster a100:8 --gbs 8 --quiet --data {file} "
       "--batcher isf --trace {out}",
       "needs a vision cap: give --vit-cap (patch tokens a micro-batch may hold)"},
      {"simulate_caps_random", ok, "simulate --model internvl-chat-1.5 --cluster a100:8 --gbs 8 --quiet --data {file} "
       "--batcher random --vit-cap 9 --trace {out}", "--vit-cap and --token-cap apply to --batcher isf and fulcrum"},
      {"simulate_unknown_batcher", ok, "simulate --model internvl-chat-1.5 --cluster a100:8 --gbs 8 --quiet --data "
       "{file} --batcher bogus --vit-cap 9 --trace {out}", "unknown batcher 'bogus'"},
      {"simulate_caps_without_data", "", "simulate --model internvl-chat-1.5 --cluster a100:8 --gbs 8 --token-cap 4096 "
       "--trace {out}", "--vit-cap and --token-cap cap --data's micro-batches"},
      {"unknown_preset", ok, "model --model vit-99b", "unknown model 'vit-99b'"},
      // A newline inside a key or an argument is written as an escape: the error stays one line.
      {"newline_in_a_key", R"({"a\nb": {"token_lengths": "x.json"}, "a\nb": {"token_lengths": "x.json"}})",
       "stats --data {file}", R"(key 'a\nb' appears twice)"},
      {"newline_in_an_argument", "", "model --model 'vit\n99b'", R"(unknown model 'vit\n99b')"},
      {"config_malformed", R"({"model_type": "llama", "hidden_size": )", "model --model {file}", "malformed JSON"},
      {"config_incomplete", R"({"model_type": "llava", "text_config": {}})", "model --model {file}",
       "vision_config is missing"},
      {"config_unknown_arch", R"({"model_type": "rwkv"})", "model --model {file}",
       "an architecture Fulcrum cannot read: 'rwkv'"},
      {"config_negative", R"({"model_type": "qwen2", "num_hidden_layers": -2})", "model --model {file}",
       "num_hidden_layers must be positive, got -2"},
      {"model_json_unknown_key",
       R"({"fulcrum": 1, "name": "m", "components": [{"name": "llm", "role": "llm", "layers": [
           {"kind": "token_embedding", "hidden": 8, "vocab": 10}, {"kind": "transformer", "hidden": 8, "ffn": 16,
            "heads": 2, "window": 4}]}]})",
       "model --model {file}", "component 0 ('llm'): layer 1: unknown key 'window'"},
      {"model_json_missing_field",
       R"({"fulcrum": 1, "name": "m", "components": [{"name": "vision", "role": "encoder", "layers": [
           {"kind": "patch_embedding", "hidden": 8}]}]})",
       "model --model {file}", "component 0 ('vision'): layer 0: in_features is missing"},
      {"model_json_wrong_type",
       R"({"fulcrum": 1, "name": "m", "components": [{"name": "llm", "role": "llm", "trainable": 1, "layers": []}]})",
       "model --model {file}", "component 0 ('llm'): trainable must be true or false"},
      {"model_json_negative",
       R"({"fulcrum": 1, "name": "m", "components": [{"name": "llm", "role": "llm", "layers": [
           {"kind": "lm_head", "hidden": 8, "vocab": -3}]}]})",
       "batch --data data/internvl_sft_1.2M.json --dp 2 --model {file} --out {out}",
       "component 0 ('llm'): layer 0: vocab must be a positive integer, got -3"},
      {"model_json_unknown_role",
       R"({"fulcrum": 1, "name": "m", "components": [{"name": "x", "role": "adapter", "layers": []}]})",
       "model --model {file}", "component 0 ('x'): unknown role 'adapter'"},
      {"model_json_unknown_kind",
       R"({"fulcrum": 1, "name": "m", "components": [{"name": "llm", "role": "llm", "layers": [
           {"kind": "mamba", "hidden": 8}]}]})",
       "model --model {file}", "component 0 ('llm'): layer 0: unknown kind 'mamba'"},
      {"model_json_two_llms",
       R"({"fulcrum": 1, "name": "m", "components": [
           {"name": "a", "role": "llm", "layers": [{"kind": "final_norm", "hidden": 8}]},
           {"name": "b", "role": "llm", "layers": [{"kind": "final_norm", "hidden": 8}]}]})",
       "plan --model {file} --cluster a100:8 --gbs 8 --quiet --out {out}",
       "component 'b' is a second llm after 'a'; a model has one llm"},
      {"model_json_version", R"({"fulcrum": 2, "name": "m", "components": []})", "model --model {file}",
       "unsupported Fulcrum model version 2"},
      {"model_recompute_unknown", ok, "model --model llama-70b --recompute some", "--recompute"},
      {"model_seq_zero", ok, "model --model llama-70b --seq 0", "--seq"},
      {"model_fp8_unknown", ok, "model --model llama-70b --dtype fp4", "--dtype"},
      {"unknown_component", ok, "model --model llava-1.5-7b --trainable adapter", "has no component 'adapter'"},
      {"model_and_cost", ok, "batch --data {file} --dp 2 --model llava-1.5-7b --cost {file} --out {out}",
       "--model and --cost both set the cost"},
      {"unknown_cluster", ok, "batch --data {file} --dp 2 --model llava-1.5-7b --cluster tpu --out {out}",
       "unknown device kind 'tpu'"},
      {"profile_bad_dtype",
       R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "tokens": [1],
           "seconds": [1]}, {"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "dtype": "int4", "tokens": [1],
           "seconds": [1]}]})",
       "simulate --model gpt-11b --cluster h100:8 --gbs 8 --tp 8 --profile {file} --trace {out}",
       "entry 1: unknown dtype 'int4'"},
      {"profile_plan",
       R"({"fulcrum_profile": 1, "entries": [{"layer": "transformer", "pass": "forward", "hidden": 8, "ffn": 16, "heads": 2, "kv_heads": 1, "head_dim": 4, "tokens": [2048, 1024],
           "seconds": [1, 2]}]})",
       "plan --model gpt-11b --cluster a100:8 --gbs 8 --quiet --profile {file} --out {out}",
       "entry 0: tokens must increase"},
      {"profile_batch", R"({"fulcrum_profile": 1, "entries": [)",
       "batch --data data/internvl_sft_1.2M.json --dp 2 --model llava-1.5-7b --profile {file} --out {out}",
       "malformed JSON"},
      {"profile_without_model", ok, "batch --data {file} --dp 2 --profile {file} --out {out}",
       "--profile and --dtype refine --model's cost: give --model"},
      {"cluster_file_plan", R"({"fulcrum": 1, "preset": "cpu:2", "device": {"flops": 1e11}})",
       "plan --model gpt-11b --cluster {file} --gbs 8 --quiet --out {out}", "device: unknown key 'flops'"},
      {"report_malformed", R"({"kind": "plan", )", "report --plan {file} --out {out}", "malformed JSON"},
      {"report_not_a_plan", R"({"kind": "schedule"})", "report --plan {file} --out {out}", "not a plan file"},
      // A "kind" of another type is no plan either (reading it as a string threw past the error contract).
      {"report_kind_a_number", R"({"kind": 5})", "report --plan {file} --out {out}", "not a plan file"},
      {"plan_vision_unit", R"([{"vision_tokens": 256, "token_num": 300}])",
       "plan --model internvl-chat-1.5 --cluster a100:8 --gbs 8 --data {file} --no-baselines --out {out}",
       ": counts vision in patch tokens (vision_tokens), but model 'internvl-chat-1.5' takes tiles (vit_num)"},
      {"simulate_vision_unit", R"([{"vision_tokens": 256, "token_num": 300}])",
       "simulate --model internvl-chat-1.5 --cluster a100:8 --gbs 8 --data {file}",
       ": counts vision in patch tokens (vision_tokens), but model 'internvl-chat-1.5' takes tiles (vit_num)"},
      {"loaded_schedule_other_cluster", "", "simulate --model gpt-11b --cluster a100:32 --gbs 8 --load-schedule "
       "fuzz/seeds/simulate_fuzz/1f1b.json", "1f1b.json: the schedule's DP 2 × TP 4 × PP 2 = 16 devices, but the "
       "cluster 'a100:32' has 32"},
      {"loaded_schedule_other_batch", "", "simulate --model gpt-11b --cluster a100:16 --gbs 9 --load-schedule "
       "fuzz/seeds/simulate_fuzz/1f1b.json", "global batch 9 is not divisible by micro-batch 1 × "
       "fuzz/seeds/simulate_fuzz/1f1b.json's DP 2"},
      {"baseline_config_other_cluster", "", "plan --model gpt-11b --cluster a100:8 --gbs 16 --baseline-config "
       "3,1,1,1,1", "baseline megatron: --baseline-config DP 3 × TP 1 × PP 1 is not the cluster's 8 devices"},
      {"baseline_config_tp_not_dividing", "", "plan --model gpt-11b --cluster a100:40 --gbs 40 --strategy zero3 "
       "--baseline-config 8,5,1,1,1", "baseline megatron: --baseline-config: TP 5 does not divide the attention heads"},
      {"baseline_config_more_stages", "", "plan --model gpt-11b --cluster a100:128 --gbs 128 --strategy zero3 "
       "--baseline-config 1,1,128,1,1", "baseline megatron: --baseline-config: PP 128 × VPP 1 stages for "},
      // plan's options the run would ignore: the batches' without --data, the synthetic samples' shape with it, an
      // encoder plan where no encoder goes into the bubbles, a baseline pin where no baseline is planned.
      {"plan_seed_without_data", "", "plan --model gpt-11b --cluster a100:8 --gbs 8 --seed 3 --root x --quiet --out {out}",
       "--root, --seed choose --data's samples and batches: give --data"},
      {"plan_shape_with_data", ok, "plan --model internvl-chat-1.5 --cluster a100:8 --gbs 8 --data {file} --seq 99 "
       "--quiet --out {out}", "--seq shapes the samples without --data; --data's samples have their own"},
      {"plan_encoder_pp_in_stages", "", "plan --model vit-3b+gpt-11b --cluster a100:8 --gbs 8 --encoders stages "
       "--encoder-pp 2 --quiet --out {out}", "--encoder-pp sets the encoder plan of encoders in the LLM's bubbles"},
      {"plan_encoder_pp_megatron", "", "plan --model vit-3b+gpt-11b --cluster a100:8 --gbs 8 --strategy megatron "
       "--encoder-pp 2 --quiet --out {out}", "--encoder-pp sets the encoder plan of encoders in the LLM's bubbles"},
      {"plan_encoder_pp_no_encoder", "", "plan --model gpt-11b --cluster a100:8 --gbs 8 --encoder-pp 2 --quiet --out "
       "{out}", "--encoder-pp: model 'gpt-11b' has no encoder"},
      {"plan_image_tokens_no_encoder", "", "plan --model gpt-11b --cluster a100:8 --gbs 8 --image-tokens 64 --quiet "
       "--out {out}", "--image-tokens: model 'gpt-11b' has no encoder"},
      {"simulate_image_tokens_with_patch_token_data", R"([{"vision_tokens": 256, "token_num": 300}])",
       "simulate --model data/modelcfg/qwen2_vl_2b_instruct.config.json --cluster a100:8 --gbs 8 --quiet --data {file} "
       "--image-tokens 64 --trace {out}", "--image-tokens shapes synthetic samples for model"},
      {"plan_baseline_config_no_baselines", "", "plan --model gpt-11b --cluster a100:8 --gbs 8 --no-baselines "
       "--baseline-config 8,1,1,1,1 --quiet --out {out}",
       "--baseline-config pins megatron, balanced and optimus's LLM plan; --strategy fulcrum with --no-baselines "
       "plans none of them"},
      // Even recomputing, 256 images a sample through ViT-22B do not fit beside the LLM: the encoders' shortfall
      // is the reason given (not that of an LLM planned into the little room left).
      {"plan_bubbles_do_not_fit", "", "plan --model vit-22b+gpt-11b --cluster a100:16 --gbs 32 --images-per-sample 256 "
       "--encoders bubbles --no-baselines --quiet --out {out}",
       "the encoders cannot run in the LLM's bubbles on this configuration: with the encoders' activations in the "
       "LLM's bubbles (their recomputation: full) a device needs"},
      {"plan_encoder_recompute_no_encoder", "", "plan --model gpt-11b --cluster a100:8 --gbs 8 --encoder-recompute full "
       "--quiet --out {out}", "--encoder-recompute: model 'gpt-11b' has no encoder"},
      {"plan_optimus_megatron_layout", "", "plan --model vit-3b+gpt-11b --cluster a100:8 --gbs 8 --strategy optimus "
       "--megatron-layout --quiet --out {out}", "--megatron-layout keeps the encoders in the first stage"},
      {"plan_optimus_pinned_twice", "", "plan --model vit-3b+gpt-11b --cluster a100:8 --gbs 8 --strategy optimus "
       "--config 1,2,4,1,2 --baseline-config 2,1,4,1,2 --quiet --out {out}",
       "--config and --baseline-config both pin --strategy optimus's LLM plan: give one"},
      {"report_root_without_data", "", "report --plan plan.json --root data --out {out}",
       "--root applies to --data"},
      {"simulate_kind_a_number", R"({"kind": 5})",
       "simulate --model gpt-11b --cluster a100:8 --gbs 8 --load-schedule {file}", "schedule: missing key \"fulcrum\""},
      {"report_without_request", R"({"kind": "plan", "strategy": "fulcrum"})", "report --plan {file} --out {out}",
       "plan: missing key \"request\""},
      {"report_request_type",
       R"({"kind": "plan", "strategy": "fulcrum", "request": {"model": "gpt-11b", "cluster": 8}})",
       "report --plan {file} --out {out}", "request: \"cluster\" must be a string"},
      {"report_optimus_type",
       R"({"kind": "plan", "strategy": "optimus", "command": "c", "request": {"model": "gpt-11b", "cluster": "a100:8",
           "dtype": "bf16", "profile": "", "data": "", "root": ".", "gbs": 8, "image_tokens": 0, "seed": 0},
           "plan": {"batcher": "random", "micro_batches": 1, "iteration_seconds": 1, "epoch_seconds": 1,
           "steps_per_epoch": 1, "samples_per_step": 8, "recompute": "", "dp": 8, "tp": 1, "pp": 1, "vpp": 1,
           "mbs": 1, "schedule": "1f1b"}, "optimus": {"efficiency_fine": "most"}})",
       "report --plan {file} --out {out}", "optimus: \"efficiency_fine\" must be a number"},
      // Counts past any run are bad input: refused in one line, not run until they overflow, hang or truncate.
      {"simulate_step_overflow", ok,
       "simulate --model internvl-chat-1.5 --cluster a100:8 --gbs 8 --quiet --data {file} --step 9223372036854775807 "
       "--trace {out}",
       "ask for steps past the epoch's 1 steps"},
      {"simulate_steps_overflow", ok,
       "simulate --model internvl-chat-1.5 --cluster a100:8 --gbs 8 --quiet --data {file} --steps 9223372036854775807 "
       "--trace {out}",
       "ask for steps past the epoch's 1 steps"},
      {"plan_gbs_huge", "", "plan --model gpt-11b --cluster a100:8 --gbs 99999999999 --quiet --out {out}",
       "--gbs 99999999999 is more than 65536 samples for each of the 8 devices"},
      {"plan_config_overflow", "", "plan --model gpt-11b --cluster a100:8 --gbs 8 --config 4294967304,1,1,1,1 --quiet "
       "--out {out}", "expected DP,TP,PP,VPP,MBS as positive integers"},
      {"plan_seq_zero", "", "plan --model gpt-11b --cluster a100:8 --gbs 8 --seq 0 --quiet --out {out}",
       "--seq must be from 1 to 16777216, got 0"},
      // Past these, a micro-batch's Σt² overflows (undefined behaviour, then times of nothing).
      {"plan_seq_huge", "", "plan --model gpt-11b --cluster a100:8 --gbs 8 --seq 4294967296 --quiet --out {out}",
       "--seq must be from 1 to 16777216, got 4294967296"},
      {"image_tokens_huge", "", "plan --model llava-1.5-7b --cluster a100:8 --gbs 8 --image-tokens 4611686018427387904 "
       "--quiet --out {out}", "--image-tokens must be from 0 to 65536"},
      {"images_per_sample_huge", "", "simulate --model llava-1.5-7b --cluster a100:8 --gbs 8 --images-per-sample "
       "100000 --trace {out}", "--images-per-sample must be from 0 to 4096, got 100000"},
      {"batch_dp_huge", ok, "batch --data {file} --dp 2000000000 --out {out}", "--dp must be at most 1048576"},
      {"cluster_devices_huge", "", "simulate --model gpt-11b --cluster a100:99999999999 --gbs 8 --trace {out}",
       "the device count must be an integer from 1 to 1048576"},
      // Options that cannot apply are refused, not ignored.
      {"image_tokens_negative", "", "simulate --model llava-1.5-7b --cluster a100:8 --gbs 8 --image-tokens -5 "
       "--trace {out}", "--image-tokens: must be an integer of at least 1, got -5"},
      {"images_without_encoder", "", "simulate --model gpt-11b --cluster h100:8 --tp 8 --gbs 8 --images-per-sample 5 "
       "--trace {out}", "model 'gpt-11b' has no encoder"},
      // One output of two that cannot be written: neither is, and the warnings of a failed run stay unsaid.
      {"second_output_unwritable", "", "simulate --model gpt-11b --cluster h100:8 --tp 8 --gbs 8 --save-schedule {out} "
       "--trace /nonexistent-fulcrum-folder/t.json", "cannot write"},
      {"second_output_a_directory", "", "simulate --model gpt-11b --cluster h100:8 --tp 8 --gbs 8 --save-schedule "
       "{out} --trace /tmp", "/tmp: cannot write (Is a directory)"},
      {"one_path_two_outputs", "", "simulate --model gpt-11b --cluster h100:8 --tp 8 --gbs 8 --save-schedule {out} "
       "--trace {out}", "given for two outputs of one run"},
      {"one_new_file_two_spellings", "", "simulate --model gpt-11b --cluster h100:8 --tp 8 --gbs 8 --save-schedule "
       "fulcrum-output-twice.json --trace ./fulcrum-output-twice.json", "given for two outputs of one run"},
      {"warnings_before_an_error", "", "batch --data data/internvl_sft_1.2M.json --dp 8 --out "
       "/nonexistent-fulcrum-folder/x.json", "cannot write"},
      // A value given twice would be read from its last place, the first dropped without a word.
      {"index_dataset_twice", R"({"a": {"token_lengths": "x.json"}, "a": {"token_lengths": "y.json"}})",
       "stats --data {file}", "key 'a' appears twice in one object"},
      {"csv_column_twice", "vit_num,token_num,token_num\n1,300,9000\n", "batch --data {file} --dp 1 --out {out}",
       "line 1: names column 'token_num' twice"},
      {"cluster_file_bad_preset", R"({"fulcrum": 1, "preset": "h100:0"})",
       "simulate --model gpt-11b --cluster {file} --gbs 8 --trace {out}", "preset: cluster 'h100:0': the device count"},
      {"cluster_key_twice", R"({"fulcrum": 1, "preset": "h100:8", "preset": "a100:8"})",
       "simulate --model gpt-11b --cluster {file} --gbs 8 --trace {out}", "key 'preset' appears twice"},
      // An output over an input of the same run would destroy the input.
      {"output_over_its_input", ok, "batch --data {file} --dp 1 --out {file}", "is an input of this run"},
      // A value that stands for the option left out, given, is not taken for the default.
      {"samples_per_step_zero", ok, "batch --data {file} --dp 2 --samples-per-step 0 --out {out}",
       "--samples-per-step: must be an integer of at least 1, got 0"},
      {"images_per_sample_default_given", "", "simulate --model llava-1.5-7b --cluster a100:8 --gbs 8 "
       "--images-per-sample -1 --trace {out}", "--images-per-sample: must be an integer of at least 0, got -1"},
      // Images the model has no encoder for would be dropped.
      {"images_for_a_text_model", ok, "simulate --model gpt-11b --cluster h100:8 --tp 8 --gbs 8 --quiet --data {file} "
       "--trace {out}", "2 of its 2 samples carry images, but model 'gpt-11b' has no encoder"},
      {"threads_past_any_machine", "", "plan --model gpt-11b --cluster a100:8 --gbs 8 --quiet --threads 100000 --out "
       "{out}", "--threads must be from 1 to 1024, got 100000"},
      // The text is printed whole or not at all.
      {"model_text_all_or_nothing", "", "model --model internvl-chat-1.5 --seq 16777216 --mbs 65536",
       "implausibly large"},
  };
  for (const BadCase& c : cases) {
    const std::string ext =
        std::string(c.name) == "csv_row" || std::string(c.name) == "csv_column_twice" ? ".csv" : ".json";
    const std::string file = (dir_ / (std::string(c.name) + ext)).string();
    if (!c.file_text.empty()) write(std::string(c.name) + ext, c.file_text);
    const std::string out = (dir_ / (std::string(c.name) + ".plan.json")).string();
    std::string args = c.args;
    for (auto [key, value] : {std::pair<std::string, std::string>{"{file}", file}, {"{out}", out}}) {
      for (size_t at; (at = args.find(key)) != std::string::npos;) args.replace(at, key.size(), value);
    }
    const Result r = run(args);
    EXPECT_EQ(r.status, 2) << c.name << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.name << ": " << r.err;
    // A message about a file names it; parameter errors have no file to name.
    if (std::string(c.args).find("{file}") != std::string::npos && std::string(c.name) != "unknown_option" &&
        std::string(c.name) != "dp_zero" && std::string(c.name) != "model_and_cost" &&
        std::string(c.name) != "unknown_cluster" && std::string(c.name) != "profile_without_model" &&
        std::string(c.name) != "unknown_algo" && std::string(c.name) != "cluster_without_model" &&
        std::string(c.name) != "isf_option_under_fulcrum" && std::string(c.name) != "algo_with_compare" &&
        std::string(c.name) != "batch_dp_huge" && std::string(c.name) != "samples_per_step_zero" &&
        std::string(c.name) != "simulate_caps_random" && std::string(c.name) != "simulate_unknown_batcher" &&
        std::string(c.name) != "plan_shape_with_data" &&
        std::string(c.name) != "simulate_image_tokens_with_patch_token_data") {
      EXPECT_NE(r.err.find(fs::path(file).filename().string()), std::string::npos) << c.name << ": " << r.err;
    }
    EXPECT_TRUE(r.out.empty()) << c.name;
    EXPECT_FALSE(fs::exists(out)) << c.name << ": partial output left behind";
  }
}

// An error about the data as a whole names the file given; one about a sample names the sample's own file, which
// for a meta index is one of its entries, and only that.
TEST_F(Cli, BatchingErrorsNameTheirFileOnce) {
  write("member.json", R"([{"vit_num": 20, "token_num": 300}, {"vit_num": 1, "token_num": 200}])");
  const std::string index = write("index.json", R"({"m": {"token_lengths": "member.json"}})");
  const Result sample = run("batch --data " + index + " --dp 1 --algo isf");
  EXPECT_EQ(sample.status, 2);
  EXPECT_NE(sample.err.find("member.json: record 0: sample 0 (20 tiles, 300 tokens) exceeds"), std::string::npos)
      << sample.err;
  EXPECT_EQ(sample.err.find("index.json"), std::string::npos) << sample.err;
  const Result whole = run("batch --data " + index + " --dp 1 --samples-per-step 4 --drop-last");
  EXPECT_EQ(whole.status, 2);
  EXPECT_NE(whole.err.find("index.json: dropping the short last step leaves no step"), std::string::npos)
      << whole.err;
}

// isf on patch-token data (Qwen2-VL): the cap search finds caps of its own, and the caps it found (or any given)
// hold in every micro-batch of `batch` and drive `simulate --batcher isf`.
TEST_F(Cli, IsfBatchesPatchTokenDataWithTheSearchOrGivenCaps) {
  nlohmann::json records = nlohmann::json::array();
  const int patches[] = {0, 256, 1024, 4096};
  for (int i = 0; i < 600; ++i) {  // a fixed mix: every vision size with short and long text
    records.push_back({{"vision_tokens", patches[i % 4]}, {"token_num", 100 + (i * 37) % 2900}});
  }
  const std::string data = write("patches.json", records.dump());
  const Result searched = run("batch --data " + data + " --dp 2 --algo isf --search --json");
  ASSERT_EQ(searched.status, 0) << searched.err;
  const auto j = nlohmann::json::parse(searched.out);
  EXPECT_FALSE(j["params"].contains("search_tokens_per_tile"));  // no tiles here
  EXPECT_EQ(j["params"]["search_token_step"], 256);
  const int64_t vit_cap = j["params"]["vit_cap"], token_cap = j["params"]["token_cap"];
  EXPECT_GE(vit_cap, 4096);  // never below the largest sample
  // b = 4 samples a group by default: a step of 2 ranks holds about 8 to 10.
  EXPECT_GE(j["samples_per_step_mean"].get<double>(), 7.5);
  EXPECT_LE(j["samples_per_step_mean"].get<double>(), 10.5);

  const std::string plan = (dir_ / "plan.json").string();
  const Result capped = run(fmt::format("batch --data {} --dp 2 --algo isf --vit-cap 5000 --token-cap 6000 --out {}",
                                        data, plan));
  ASSERT_EQ(capped.status, 0) << capped.err;
  std::ifstream in(plan);
  const auto p = nlohmann::json::parse(in);
  size_t samples = 0;
  for (const auto& step : p["steps"]) {
    for (const auto& rank : step) {
      for (const auto& micro_batch : rank) {
        int64_t vision = 0, tokens = 0;
        for (const auto& id : micro_batch) {
          vision += records[id.get<size_t>()]["vision_tokens"].get<int64_t>();
          tokens += records[id.get<size_t>()]["token_num"].get<int64_t>();
          ++samples;
        }
        EXPECT_LE(vision, 5000);
        EXPECT_LE(tokens, 6000);
      }
    }
  }
  EXPECT_EQ(samples, records.size());

  const std::string simulate = "simulate --model data/modelcfg/qwen2_vl_2b_instruct.config.json --cluster a100:2 "
                               "--gbs 8 --quiet --json --batcher isf --data " + data;
  const Result tight = run(simulate + " --vit-cap 4096 --token-cap 4096");
  const Result loose = run(fmt::format("{} --vit-cap {} --token-cap {}", simulate, vit_cap * 2, token_cap * 2));
  ASSERT_EQ(tight.status, 0) << tight.err;
  ASSERT_EQ(loose.status, 0) << loose.err;
  const auto t = nlohmann::json::parse(tight.out), l = nlohmann::json::parse(loose.out);
  EXPECT_EQ(t["data"]["vit_cap"], 4096);
  EXPECT_EQ(l["data"]["vit_cap"], vit_cap * 2);
  // Twice the caps put more samples in a micro-batch: a longer first step.
  EXPECT_GT(l["iteration_seconds"].get<double>(), t["iteration_seconds"].get<double>());

  // OmniBal's strategy searches for the caps it needs here, for each configuration.
  const Result omnibal = run("plan --model data/modelcfg/qwen2_vl_2b_instruct.config.json --cluster a100:2 --gbs 8 "
                             "--strategy omnibal --no-baselines --quiet --json --data " + data);
  ASSERT_EQ(omnibal.status, 0) << omnibal.err;
  EXPECT_EQ(nlohmann::json::parse(omnibal.out)["plan"]["batcher"], "isf");

  // Where the search finds no caps for a configuration's samples per micro-batch (samples of 16,384 patch tokens
  // beside short ones, 64 trials of 256 tokens' worth), that configuration is left out, and said so; with none left
  // the plan is refused, naming the data.
  nlohmann::json wide = nlohmann::json::array();
  for (int i = 0; i < 2000; ++i) {
    wide.push_back({{"vision_tokens", std::vector<int>{0, 1024, 4096, 16384}[i % 4]}, {"token_num", 100 + (i * 37) % 7900}});
  }
  const std::string wide_data = write("wide.json", wide.dump());
  const std::string plan_wide = "plan --model data/modelcfg/qwen2_vl_2b_instruct.config.json --strategy omnibal "
                                "--no-baselines --quiet --data " + wide_data;
  const Result some = run(plan_wide + " --cluster a100:2 --gbs 32 --json");
  ASSERT_EQ(some.status, 0) << some.err;
  const auto s = nlohmann::json::parse(some.out);
  ASSERT_FALSE(s["left_out"].empty());
  for (const auto& reason : s["left_out"]) {
    EXPECT_NE(reason.get<std::string>().find("the isf cap search found no caps"), std::string::npos) << reason;
  }
  const Result none = run(plan_wide + " --cluster a100:1 --gbs 32 --config 1,1,1,1,4");
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("wide.json: no configuration's batches could be made: DP 1 × 8 micro-batches"),
            std::string::npos) << none.err;
}

// An output named by a symbolic link replaces the file the link names and keeps the link; an empty value is refused,
// not taken for the option left out; output that cannot reach stdout fails the run.
// Standard output that cannot be written fails the run, which then leaves none of its files: they are renamed
// into place only once the run's standard output is out, and no staged file is left beside them.
TEST_F(Cli, AStandardOutputThatCannotBeWrittenLeavesNoFiles) {
  const std::string data = write("lengths.json", R"([{"vit_num": 1, "token_num": 30}, {"vit_num": 2, "token_num": 40}])");
  for (const std::string& outputs : {std::string("batch --data {data} --dp 1 --out {dir}/plan.json"),
                                     std::string("simulate --model gpt-11b --cluster h100:8 --gbs 8 --tp 8 "
                                                 "--save-schedule {dir}/s.json --trace {dir}/t.json")}) {
    std::string args = outputs;
    for (auto [key, value] : {std::pair<std::string, std::string>{"{data}", data}, {"{dir}", dir_.string()}}) {
      for (size_t at; (at = args.find(key)) != std::string::npos;) args.replace(at, key.size(), value);
    }
    const fs::path err = dir_ / "stderr";
    const std::string command = fmt::format("cd '{}' && '{}' {} > /dev/full 2> '{}' < /dev/null", FULCRUM_SOURCE_DIR,
                                            FULCRUM_BINARY, args, err.string());
    const int raw = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(raw));
    EXPECT_EQ(WEXITSTATUS(raw), 2) << args;
    EXPECT_EQ(slurp(err), "fulcrum: error: standard output: cannot write\n") << args;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      EXPECT_TRUE(name == "lengths.json" || name == "stderr") << args << ": left " << name;
    }
    ASSERT_EQ(run(args).status, 0) << args;  // the same run to a file writes them
    EXPECT_TRUE(fs::exists(dir_ / (outputs.find("plan.json") != std::string::npos ? "plan.json" : "s.json")));
    for (const char* name : {"plan.json", "s.json", "t.json", "stdout"}) fs::remove(dir_ / name);
  }
}

TEST_F(Cli, OutputsGoThroughLinksAndEmptyValuesAreRefused) {
  const std::string data = write("d.json", R"([{"vit_num": 1, "token_num": 300}, {"vit_num": 0, "token_num": 20}])");
  fs::create_directories(dir_ / "plans");
  fs::create_symlink("plans/real.json", dir_ / "link.json");
  const Result linked = run("batch --data " + data + " --dp 1 --quiet --out " + (dir_ / "link.json").string());
  ASSERT_EQ(linked.status, 0) << linked.err;
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.json"));
  EXPECT_NE(slurp(dir_ / "plans" / "real.json").find("batch_plan"), std::string::npos);

  const Result empty = run("batch --data " + data + " --dp 1 --quiet --out ''");
  EXPECT_EQ(empty.status, 2);
  EXPECT_EQ(empty.err, "fulcrum: error: --out is given an empty value (see --help)\n");

  // /dev/stdout is the descriptor the run was given: appended to a log, the log keeps what it held.
  const std::string log = (dir_ / "run.log").string();
  std::ofstream(log) << "EARLIER\n";
  const std::string to_stdout = fmt::format("cd '{}' && '{}' batch --data {} --dp 1 --quiet --out /dev/stdout >> '{}'",
                                            FULCRUM_SOURCE_DIR, FULCRUM_BINARY, data, log);
  ASSERT_EQ(std::system(to_stdout.c_str()), 0);
  EXPECT_EQ(slurp(log).rfind("EARLIER\n{\"fulcrum\":1,\"kind\":\"batch_plan\"", 0), 0u) << slurp(log);
  // A dangling link and the file it names are one output.
  fs::create_symlink("x.json", dir_ / "to_x.json");
  const Result twice = run("simulate --model gpt-11b --cluster h100:8 --gbs 8 --tp 8 --quiet --save-schedule " +
                           (dir_ / "to_x.json").string() + " --trace " + (dir_ / "x.json").string());
  EXPECT_EQ(twice.status, 2);
  EXPECT_NE(twice.err.find("given for two outputs of one run"), std::string::npos) << twice.err;

  // A folder where a file is read is said to be one (not "malformed JSON at byte 1").
  for (const std::string& args : {"stats --data " + dir_.string(),
                                  "simulate --model gpt-11b --cluster h100:8 --gbs 8 --tp 8 --profile " + dir_.string()}) {
    const Result folder = run(args);
    EXPECT_EQ(folder.status, 2) << args;
    EXPECT_EQ(folder.err, fmt::format("fulcrum: error: {}: is a folder, not a file\n", dir_.string())) << args;
  }

  const std::string full = fmt::format("cd '{}' && '{}' stats --data {} > /dev/full 2> '{}'", FULCRUM_SOURCE_DIR,
                                       FULCRUM_BINARY, data, (dir_ / "err").string());
  const int raw = std::system(full.c_str());
  EXPECT_EQ(WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, 2);
  EXPECT_EQ(slurp(dir_ / "err"), "fulcrum: error: standard output: cannot write\n");
}

// A plan's report: every section, a timeline row per pipeline rank, the compared plan with the speed-up its
// epoch gives (from both plan files), the measured trace's rows, each rank's load over the steps asked for, and
// the same bytes on a second run. Bad compared plans and traces are refused before anything is written.
TEST_F(Cli, ReportShowsEveryRankTheComparedPlansAndTheMeasuredTrace) {
  const std::string plan = (dir_ / "plan.json").string(), other = (dir_ / "megatron.json").string();
  const std::string trace = (dir_ / "trace.json").string(), html = (dir_ / "report.html").string();
  const std::string job = "--model internvl-chat-1.5 --cluster a100:64 --gbs 128 --quiet --no-baselines "
                          "--data data/internvl_sft_1.2M.json";
  ASSERT_EQ(run("plan " + job + " --out " + plan).status, 0);
  ASSERT_EQ(run("plan " + job + " --strategy megatron --out " + other).status, 0);
  ASSERT_EQ(run("simulate --model gpt-11b --cluster a100:16 --gbs 32 --pp 4 --quiet --trace " + trace).status, 0);
  const std::string args = "report --plan " + plan + " --compare " + other + " --trace " + trace + " --steps 12 --out ";
  const Result r = run(args + html);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string page = slurp(html);
  for (const char* id : {"summary", "timeline", "idle", "memory", "balance", "compare", "measured"}) {
    EXPECT_NE(page.find(fmt::format("<section id=\"{}\">", id)), std::string::npos) << id;
  }
  const auto planned = nlohmann::json::parse(slurp(plan)), baseline = nlohmann::json::parse(slurp(other));
  auto svg = [&](const std::string& id) {
    const size_t at = page.find("<svg id=\"" + id + "\"");
    return at == std::string::npos ? std::string() : page.substr(at, page.find("</svg>", at) - at);
  };
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(svg("timeline-chart"), "class=\"timeline-row\""), planned["plan"]["pp"].get<int>());
  EXPECT_EQ(count(svg("idle-chart"), "class=\"bar\""), planned["plan"]["pp"].get<int>());
  // The trace: pp 4 ranks, each with its compute, transfer and collective threads.
  EXPECT_GE(count(svg("measured-chart"), "class=\"timeline-row\""), 4);
  EXPECT_EQ(count(svg("loads-before"), "<rect"), 12);
  EXPECT_EQ(count(svg("loads-after"), "<rect"), 12);
  const double speedup = baseline["plan"]["epoch_seconds"].get<double>() / planned["plan"]["epoch_seconds"].get<double>();
  EXPECT_NE(page.find(fmt::format("<td>{:.2f}×</td>", speedup)), std::string::npos) << speedup;
  EXPECT_NE(page.find("<th scope=\"row\">megatron</th>"), std::string::npos);
  EXPECT_NE(page.find(planned["command"].get<std::string>()), std::string::npos) << "the plan's command is shown";
  // The summary's MFU is the plan's own, over its simulated steps, as `plan --json` gives it.
  EXPECT_NE(page.find(fmt::format("{:.1f}% (the mean over the simulated steps)",
                                  100 * planned["predicted"]["mfu"].get<double>())),
            std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos) << "nothing runs or is fetched";
  EXPECT_EQ(page.find("http"), std::string::npos) << "nothing is fetched";
  fs::remove(html);
  ASSERT_EQ(run(args + html).status, 0);
  EXPECT_TRUE(slurp(html) == page) << "the same inputs give the same bytes";

  // Another replica's timeline on request.
  const std::string chosen = (dir_ / "replica.html").string();
  ASSERT_EQ(run("report --plan " + plan + " --replica 3 --out " + chosen).status, 0);
  const int dp = planned["plan"]["dp"].get<int>();
  EXPECT_NE(slurp(chosen).find(fmt::format("Data-parallel replica 3 of {}", dp)), std::string::npos);

  const std::string bad_trace = write("bad_trace.json", R"({"traceEvents": [{"ph": "X", "ts": 0, "dur": -5}]})");
  // Plan files edited into what no run could be are refused, not reported as given.
  auto edited = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json doc = planned;
    edit(doc);
    return write(name, doc.dump());
  };
  const std::string other_cluster = edited("other_cluster.json", [](nlohmann::json& d) {
    d["cluster"] = d["request"]["cluster"] = "a100:128";
  });
  const std::string negative_epoch = edited("negative_epoch.json", [](nlohmann::json& d) {
    d["plan"]["epoch_seconds"] = -1;
  });
  const std::string version_two = edited("version_two.json", [](nlohmann::json& d) { d["fulcrum"] = 2; });
  // A summary that says one plan over a schedule that runs another: each would be shown as given, beside a
  // timeline of something else.
  const std::pair<std::function<void(nlohmann::json&)>, std::string> contradictions[] = {
      {[](nlohmann::json& d) { d["plan"]["pp"] = d["plan"]["pp"].get<int>() * 2; }, "\"pp\" is"},
      {[](nlohmann::json& d) { d["plan"]["dp"] = d["plan"]["dp"].get<int>() + 1; }, "\"dp\" is"},
      {[](nlohmann::json& d) { d["plan"]["schedule"] = "gpipe"; }, "\"schedule\" is 'gpipe'"},
      {[](nlohmann::json& d) { d["plan"]["stages"][0][1] = d["plan"]["stages"][0][1].get<int>() + 1; },
       "\"stages\" differ"},
      {[](nlohmann::json& d) { d["plan"]["recompute"] = "0 none, 0 selective, 0 full"; }, "\"recompute\" is"},
      {[](nlohmann::json& d) { d["plan"]["epoch_seconds"] = d["plan"]["epoch_seconds"].get<double>() * 2; },
       "\"epoch_seconds\" is"},
      {[](nlohmann::json& d) { d["plan"]["batcher"] = "smart"; }, "unknown batcher 'smart'"},
      {[](nlohmann::json& d) { d["strategy"] = "fastest"; }, "unknown strategy"},
      {[](nlohmann::json& d) { d["gbs"] = 4096; }, "\"gbs\" is 4096, but the request's is"},
      {[](nlohmann::json& d) { d["model"] = "gpt-175b"; }, "made for model 'gpt-175b'"},
      {[](nlohmann::json& d) { d["optimus"] = {{"efficiency_fine", 1.5}}; }, "between 0 and 1"},
  };
  std::vector<std::pair<std::string, std::string>> refused{{other_cluster, "cluster 'a100:128' has 128 devices"},
                                                           {negative_epoch, "\"epoch_seconds\" must be positive"},
                                                           {version_two, "unsupported plan file version 2"}};
  for (size_t k = 0; k < std::size(contradictions); ++k) {
    refused.push_back({edited(fmt::format("contradiction_{}.json", k), contradictions[k].first),
                       contradictions[k].second});
  }
  nlohmann::json encoders_nowhere = baseline;  // megatron's encoders run in its first stage, not in bubbles
  encoders_nowhere["optimus"] = {{"efficiency_fine", 0.5}};
  refused.push_back({write("encoders_nowhere.json", encoders_nowhere.dump()), "no encoder section"});
  for (const auto& [file, message] : refused) {
    const std::string out = (dir_ / "bad.html").string();
    const Result b = run("report --plan " + file + " --out " + out);
    EXPECT_EQ(b.status, 2) << file << ": " << b.err;
    EXPECT_NE(b.err.find(fs::path(file).filename().string() + ": "), std::string::npos) << b.err;
    EXPECT_NE(b.err.find(message), std::string::npos) << b.err;
    EXPECT_FALSE(fs::exists(out));
  }
  nlohmann::json other_seed = baseline;  // the same plan over another shuffle of the samples: another job
  other_seed["request"]["seed"] = 7;
  const std::string other_job = write("other_seed.json", other_seed.dump());
  const std::pair<std::string, std::string> bad[] = {
      {"--compare " + trace, "not a plan file"},
      {"--compare " + other_job, "other_seed.json: request: \"seed\" is '7', but "},
      {"--trace " + bad_trace, "bad_trace.json: traceEvents[0]: negative \"dur\""},
      {"--trace " + plan, "not a Chrome trace (no \"traceEvents\")"},
      {"--steps 0", "--steps must be at least 1"},
      {"--replica 99", "--replica 99: " + plan + " has data-parallel replicas 0 to"},
  };
  for (const auto& [extra, message] : bad) {
    const std::string out = (dir_ / "bad.html").string();
    const Result b = run("report --plan " + plan + " " + extra + " --out " + out);
    EXPECT_EQ(b.status, 2) << extra << ": " << b.err;
    EXPECT_EQ(std::count(b.err.begin(), b.err.end(), '\n'), 1) << extra << ": " << b.err;
    EXPECT_NE(b.err.find(message), std::string::npos) << extra << ": " << b.err;
    EXPECT_FALSE(fs::exists(out)) << extra;
  }
}

// `fulcrum plan --report` writes the same kind of page, its baselines side by side.
TEST_F(Cli, PlanWritesItsReportBesideItsBaselines) {
  const std::string html = (dir_ / "plan.html").string();
  const Result r = run("plan --model gpt-11b --cluster a100:16 --gbs 64 --quiet --report " + html);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string page = slurp(html);
  for (const char* baseline : {"zero3", "megatron", "balanced"}) {
    EXPECT_NE(page.find(fmt::format("<th scope=\"row\">{}</th>", baseline)), std::string::npos) << baseline;
  }
  EXPECT_NE(page.find("without data"), std::string::npos) << "the load section says why it is empty";

  // Baselines that do not fit are listed with the planner's reason, as --json gives it.
  const std::string tight = (dir_ / "tight.html").string();
  const Result t = run("plan --model internvl-chat-1.5 --cluster a100:8 --gbs 16 --seq 16384 --quiet --json --report " +
                       tight);
  ASSERT_EQ(t.status, 0) << t.err;
  const auto j = nlohmann::json::parse(t.out);
  const std::string tight_page = slurp(tight);
  int unfit = 0;
  for (const auto& [name, b] : j["baselines"].items()) {
    if (b.contains("fits") && !b["fits"].get<bool>()) {
      ++unfit;
      EXPECT_NE(tight_page.find("does not fit: " + b["reason"].get<std::string>()), std::string::npos)
          << name;
    }
  }
  EXPECT_GT(unfit, 0) << "the case needs a baseline that does not fit";
}

// OmniBal's ISF on patch-token data chooses its caps by search: the plan file keeps them, so its report makes
// the same batches again, and says how many samples a step they hold.
TEST_F(Cli, AnIsfPlanOnPatchTokenDataIsReportedWithTheCapsItWasPlannedWith) {
  std::string data = "[";
  for (int i = 0; i < 600; ++i) {
    const int vision = (i * 7919) % 5 * 512;
    data += fmt::format("{}{{\"vision_tokens\": {}, \"token_num\": {}}}", i ? "," : "", vision, 64 + (i * 104729) % 1400 + vision / 4);
  }
  const std::string file = write("patches.json", data + "]");
  const std::string plan = (dir_ / "isf.json").string(), html = (dir_ / "isf.html").string();
  const Result r = run("plan --model data/modelcfg/qwen2_vl_2b_instruct.config.json --cluster a100:8 --gbs 32 --data " +
                       file + " --strategy omnibal --no-baselines --quiet --out " + plan + " --report " + html);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto p = nlohmann::json::parse(slurp(plan));
  ASSERT_TRUE(p["plan"].contains("batch_caps")) << p["plan"].dump();
  const Result again = run("report --plan " + plan + " --out " + (dir_ / "again.html").string());
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_NE(slurp(html).find(fmt::format("isf batches give {:.1f} samples a step",
                                         p["plan"]["samples_per_step"].get<double>())),
            std::string::npos);
}

// `fulcrum multitask --report`: the waves a row per device, every section, and each arrangement's iteration
// against the plan's as `--json` prints them.
TEST_F(Cli, MultitaskReportShowsTheWavesPerDeviceAndTheArrangements) {
  const std::string html = (dir_ / "waves.html").string();
  const Result r = run("multitask --tasks multitask-clip-4 --cluster a800:8 --json --report " + html);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const std::string page = slurp(html);
  for (const char* id : {"summary", "timeline", "idle", "memory", "compare"}) {
    EXPECT_NE(page.find(fmt::format("<section id=\"{}\">", id)), std::string::npos) << id;
  }
  const size_t at = page.find("<svg id=\"timeline-chart\"");
  ASSERT_NE(at, std::string::npos);
  const std::string chart = page.substr(at, page.find("</svg>", at) - at);
  int rows = 0;
  for (size_t p = chart.find("class=\"timeline-row\""); p != std::string::npos; p = chart.find("class=\"timeline-row\"", p + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows, 8);
  for (const char* task : {"vision-text forward", "vision-thermal backward"}) {
    EXPECT_NE(page.find(task), std::string::npos) << task;
  }
  const double plan = j["iteration_seconds"].get<double>();
  for (const char* b : {"sequential", "per_task", "task_greedy"}) {
    const double speedup = j["baselines"][b]["iteration_seconds"].get<double>() / plan;
    EXPECT_NE(page.find(fmt::format("<td>{:.2f}×</td>", speedup)), std::string::npos) << b << " " << speedup;
  }
  const Result bad = run("multitask --tasks multitask-clip-4 --cluster a800:8 --report " + (dir_ / "no/such/dir/x.html").string());
  EXPECT_EQ(bad.status, 2) << bad.err;
}

// Everything outside "timing" (and Optimus's scheduler_seconds, a wall time too) is byte-identical across runs.
std::string without_timing(const std::string& text) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
  j.erase("timing");
  if (j.contains("optimus")) j["optimus"].erase("scheduler_seconds");
  if (j.contains("rows")) {
    for (auto& row : j["rows"]) row.erase("timing");
  }
  return j.dump();
}

TEST_F(Cli, BatchJsonIsDeterministicAndComplete) {
  const std::string args = "batch --data data/internvl_sft_1.2M.json --dp 8 --json --out " + (dir_ / "p.json").string();
  const Result a = run(args);
  const Result b = run(args);
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(without_timing(a.out), without_timing(b.out));
  const auto j = nlohmann::json::parse(a.out);
  for (const char* key : {"algo", "dp", "samples_in", "samples_out", "repeated", "dropped", "duplicated", "steps",
                          "microbatches_per_rank_per_step", "samples_per_step_mean", "metrics", "params", "timing"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* key : {"pad_ratio", "dist_ratio_vit", "dist_ratio_llm", "dist_ratio_vit_floor",
                          "dist_ratio_llm_floor", "time_imbalance", "per_microbatch"}) {
    EXPECT_TRUE(j["metrics"].contains(key)) << key;
  }
  EXPECT_EQ(j["samples_in"], 60495);
  EXPECT_EQ(j["samples_out"].get<int64_t>(), 60495 + j["repeated"].get<int64_t>());
  EXPECT_EQ(j["duplicated"], 0);
  // The six index entries whose files are not bundled are reported, one line each.
  EXPECT_EQ(std::count(a.err.begin(), a.err.end(), '\n'), 6) << a.err;
  // The written plan agrees with the summary.
  const auto plan = nlohmann::json::parse(slurp(dir_ / "p.json"));
  EXPECT_EQ(plan["fulcrum"], 1);
  EXPECT_EQ(plan["steps"].size(), j["steps"].get<size_t>());
  EXPECT_EQ(plan["steps"][0].size(), 8u);
}

TEST_F(Cli, CompareRunsEveryBatcher) {
  const Result r = run("batch --data data/vision/ai2d_train_12k_wh_token_lengths.json --dp 8 --compare --search --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  std::vector<std::string> labels;
  for (const auto& row : j["rows"]) labels.push_back(row["label"]);
  EXPECT_EQ(labels.size(), 7u);
  EXPECT_EQ(labels.front(), "random");
  EXPECT_EQ(labels.back(), "fulcrum");
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(Cli, ModelJsonListsComponentsWithTheirParameters) {
  const Result r = run("model --model llava-1.5-7b --trainable projector --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["name"], "llava-1.5-7b");
  ASSERT_EQ(j["components"].size(), 3u);
  int64_t sum = 0;
  for (const auto& c : j["components"]) {
    sum += c["parameters"].get<int64_t>();
    EXPECT_EQ(c["trainable"], c["name"] == "projector");
    EXPECT_FALSE(c["layers"].empty());
  }
  EXPECT_EQ(j["parameters"].get<int64_t>(), sum);
  EXPECT_EQ(j["trainable_parameters"], j["components"][1]["parameters"]);
  // CLIP-L/14-336 runs 23 of its 24 blocks on a 577-token tile; the LLM's token costs 6 × its matmul weights
  // (the head included, the embedding lookup not) when trained, 4 × when frozen (no weight gradients).
  EXPECT_EQ(j["components"][0]["flops"]["unit"], "tile");
  EXPECT_EQ(j["components"][2]["flops"]["unit"], "token");
  const double llm_matmul_weights = j["components"][2]["parameters"].get<double>() -
                                    32064.0 * 4096 - 4096 * 65.0;  // embedding, RMSNorm weights
  EXPECT_NEAR(j["components"][2]["flops"]["per_unit"].get<double>(), 4 * llm_matmul_weights, 1e3);
  EXPECT_DOUBLE_EQ(j["components"][2]["training_state_bytes_unsharded"].get<double>(),
                   2 * j["components"][2]["parameters"].get<double>());
  // A config.json reads the same way as a preset.
  const Result from_file = run("model --model " + std::string(FULCRUM_SOURCE_DIR) +
                               "/data/modelcfg/llava_1_5_7b_hf.config.json --json");
  ASSERT_EQ(from_file.status, 0) << from_file.err;
  EXPECT_EQ(nlohmann::json::parse(from_file.out)["parameters"], j["parameters"]);
}

// What `fulcrum model --json` writes, `--model` reads back as the same model: the same output again.
TEST_F(Cli, ModelJsonReadsBackAsTheSameModel) {
  for (const char* model : {"internvl-chat-1.5", "internvl-chat-1.5-plus", "llava-1.5-7b", "llama-70b",
                            "vit-22b+vit-5b+gpt-175b", "internvit-6b"}) {
    const Result first = run(fmt::format("model --model {} --json", model));
    ASSERT_EQ(first.status, 0) << model << ": " << first.err;
    const std::string file = write(std::string(model) + ".json", first.out);
    const Result again = run("model --model " + file + " --json");
    ASSERT_EQ(again.status, 0) << model << ": " << again.err;
    EXPECT_EQ(again.out, first.out) << model;
    // The text view reads the same from either source.
    EXPECT_EQ(run("model --model " + file).out, run(fmt::format("model --model {}", model)).out) << model;
  }
  // A frozen component stays frozen.
  const Result frozen = run("model --model llava-1.5-7b --trainable projector --json");
  const std::string file = write("frozen.json", frozen.out);
  EXPECT_EQ(run("model --model " + file + " --json").out, frozen.out);
}

// A model named after its file, whose name is not UTF-8 (Linux file names are bytes): the JSON output writes the
// byte as U+FFFD where the writer stopped the run with an abort.
TEST_F(Cli, JsonOutputOfANameThatIsNotUtf8IsStillJson) {
  const std::string config =
      write("\xfe.json", slurp(fs::path(FULCRUM_SOURCE_DIR) / "data/modelcfg/internlm2_20b.config.json"));
  const Result r = run("model --model '" + config + "' --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["name"], "\xef\xbf\xbd");  // U+FFFD
  // A trace's title names the model.
  const std::string trace = (dir_ / "trace.json").string();
  const Result traced = run("simulate --model '" + config + "' --cluster a100:8 --gbs 8 --quiet --trace " + trace);
  ASSERT_EQ(traced.status, 0) << traced.err;
  EXPECT_NE(nlohmann::json::parse(slurp(trace))["otherData"]["title"].get<std::string>().find("\xef\xbf\xbd"),
            std::string::npos);
  // A plan file records the names to make the plan again: one that is not UTF-8 is refused, not rewritten.
  const std::string plan = (dir_ / "plan.json").string();
  const Result planned = run("plan --model '" + config + "' --cluster a100:8 --gbs 8 --quiet --out " + plan);
  EXPECT_EQ(planned.status, 2);
  EXPECT_NE(planned.err.find("--model: a name that is not UTF-8 text cannot be recorded in the plan file"),
            std::string::npos) << planned.err;
  EXPECT_FALSE(fs::exists(plan));
}

TEST_F(Cli, ModelShowsActivationMemoryForAStatedMicroBatch) {
  const Result r = run("model --model llama-70b --seq 4096 --mbs 2 --tp 8 --sp --recompute selective --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["micro_batch"]["tokens_per_sequence"], 4096);
  EXPECT_EQ(j["micro_batch"]["recompute"], "selective");
  const auto& llm = j["components"][0];
  // A LLaMA-2-70B block, T = 2 × 4096 tokens, tp 8 with sequence parallelism, selective recomputation, no
  // dropout: (norms 4Th + QKV and MLP inputs 4Th + Q and projection input 4T·8192 + K, V 4T·1024 + SwiGLU
  // 6T·28672) / 8 = 8192 · 274,432 / 8 bytes.
  const double block = 8192.0 * 274432 / 8;
  EXPECT_EQ(llm["layers"][1]["kind"], "transformer");
  EXPECT_DOUBLE_EQ(llm["layers"][1]["activation_bytes"].get<double>(), block);
  EXPECT_DOUBLE_EQ(llm["activation_bytes"]["transformer_blocks"].get<double>(), 80 * block);
  EXPECT_EQ(llm["activation_bytes"]["tokens"], 8192);
  EXPECT_FALSE(llm["layers"][0].contains("activation_bytes"));  // the embedding: not a block

  // Encoders: each item is a sequence of its tile's tokens. InternViT's 25 heads stay whole at tp 2.
  const auto vl = nlohmann::json::parse(run("model --model internvl-chat-1.5 --images 3 --tp 2 --json").out);
  EXPECT_EQ(vl["components"][0]["activation_bytes"]["sequences"], 3);
  EXPECT_EQ(vl["components"][0]["activation_bytes"]["tokens"], 3 * 1025);
  EXPECT_EQ(vl["components"][0]["activation_bytes"]["tp"], 1);
  EXPECT_EQ(vl["components"][2]["activation_bytes"]["tp"], 2);
  EXPECT_EQ(vl["components"][2]["activation_bytes"]["tokens"], 2048);  // the default --seq
  // Full recomputation keeps only each block's input: 2Th at tp 1.
  const auto full = nlohmann::json::parse(run("model --model internlm2-20b --recompute full --json").out);
  EXPECT_DOUBLE_EQ(full["components"][0]["layers"][1]["activation_bytes"].get<double>(), 2.0 * 2048 * 6144);
  // The text view states the micro-batch and the bytes per block.
  const Result text = run("model --model internlm2-20b --cp 2");
  EXPECT_NE(text.out.find("micro-batch of 1 × 2048 tokens"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("cp 2"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("activations 556.0 MiB each"), std::string::npos) << text.out;  // half of tp 1's
}

TEST_F(Cli, BatchBalancesWithAModelsCost) {
  const std::string data = std::string(FULCRUM_SOURCE_DIR) + "/data/internvl_sft_1.2M.json";
  const Result r = run("batch --data " + data + " --root " + FULCRUM_SOURCE_DIR +
                       " --dp 8 --model internvl-chat-1.5 --cluster h100 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["params"]["model"], "internvl-chat-1.5");
  EXPECT_EQ(j["params"]["cluster"], "h100");
  EXPECT_EQ(j["duplicated"], 0);
  // Balanced by the model's own cost, measured by it too: as tight as with the pinned coefficients.
  EXPECT_LT(j["metrics"]["time_imbalance"].get<double>(), 0.02);
}

// `fulcrum simulate`: parameters that cannot form a plan get one line and status 2, and no trace file.
TEST_F(Cli, SimulateBadInputTable) {
  const std::string trace = (dir_ / "trace.json").string(), saved = (dir_ / "saved.json").string();
  ASSERT_EQ(run("simulate --model gpt-11b --cluster h100:8 --gbs 8 --tp 8 --quiet --save-schedule " + saved).status, 0);
  const std::pair<std::string, std::string> cases[] = {
      // What a loaded schedule sets, given too, would be ignored.
      {"--model gpt-11b --cluster h100:8 --gbs 8 --load-schedule " + saved + " --tp 8 --zero 3",
       "saved.json: the loaded schedule sets the layout, schedule and recomputation; leave out --tp, --zero"},
      {"--model gpt-11b --cluster h100:64 --gbs 64 --tp 8 --pp 4 --dp 4", "DP 4 × TP 8 × PP 4 = 128 devices"},
      // Options the run would ignore: the batcher's without --data, the synthetic samples' shape with it.
      {"--model gpt-11b --cluster h100:64 --gbs 64 --tp 8 --batcher isf --seed 3",
       "--batcher, --seed choose --data's batches: give --data"},
      {"--model internvl-chat-1.5 --cluster a100:8 --gbs 8 --data data/vision/ai2d_train_12k_wh_token_lengths.json "
       "--seq 99999 --images-per-sample 7", "--seq, --images-per-sample shape the samples without --data"},
      // The value that stands for the option left out, given: refused, not taken as unset.
      {"--model gpt-11b --cluster h100:64 --gbs 64 --tp 8 --dp 0", "--dp"},
      {"--model internvl-chat-1.5 --cluster a100:8 --gbs 8 --encoder-tp 0", "--encoder-tp"},
      {"--model internvl-chat-1.5 --cluster a100:8 --gbs 8 --image-tokens 0", "--image-tokens"},
      {"--model gpt-11b --cluster h100:64 --gbs 100 --mbs 2 --tp 8 --pp 2", "global batch 100 is not divisible"},
      {"--model gpt-11b --cluster h100:64 --gbs 12 --tp 8 --pp 4 --vpp 2",
       "interleaved 1F1B needs micro-batches divisible by pp: 6 micro-batches, pp 4"},
      {"--model gpt-11b --cluster h100:512 --gbs 64 --tp 1 --pp 16 --vpp 8",
       "has 80 transformer blocks to spread over 128 pipeline stages"},
      {"--model internvl-chat-1.5 --cluster a100:64 --gbs 64 --tp 8 --pp 2",
       "does not divide the 25 heads (25 key/value) of component 'vision'"},
      {"--model gpt-11b --cluster h100:64 --gbs 64 --tp 8 --schedule wavy", "unknown pipeline schedule 'wavy'"},
      {"--model gpt-11b --cluster h100:64 --gbs 64 --tp 8 --pp 2 --vpp 2 --schedule zb-h1",
       "the zb-h1 schedule has one model chunk per rank"},
      {"--model gpt-11b --cluster h100:64 --gbs 64 --tp 8 --recompute some", "--recompute some"},
      {"--model gpt-11b --cluster a100:8 --gbs 8 --tp 8 --dtype fp8",
       "dtype fp8 needs fp8 tensor cores (h100, h200); a100 has none"},
      {"--model gpt-11b --cluster cpu:2 --gbs 2 --dtype fp8",
       "dtype fp8 needs fp8 tensor cores (h100, h200); cpu has none"},
      {"--model gpt-11b --cluster h100:8 --gbs 8 --tp 8 --dtype fp4", "--dtype"},
      {"--model gpt-11b --cluster h100:8 --gbs 8 --tp 8 --batcher bogus", "unknown batcher 'bogus'"},
      {"--model gpt-11b --cluster h100:8 --gbs 8 --tp 8 --profile no-such-profile.json",
       "no-such-profile.json: cannot open"},
      // mbs × dp past 64 bits wrapped to 0 and divided by it; mbs × seq² wrapped into a negative MFU.
      {"--model gpt-11b --cluster h100:4 --gbs 8 --mbs 4611686018427387904",
       "--mbs must be from 1 to the global batch (8), got 4611686018427387904"},
      {"--model gpt-11b --cluster h100:1 --gbs 32768 --mbs 32768 --seq 16777216 --recompute none",
       "--mbs 32768 × --seq 16777216 squared is more attention than a micro-batch can count"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = run("simulate " + args + " --trace " + trace);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << args;
    EXPECT_FALSE(fs::exists(trace)) << args;
  }
}

TEST_F(Cli, SimulateReportsTheIterationAndWritesATrace) {
  const std::string trace = (dir_ / "trace.json").string();
  const std::string args = "simulate --model vit-3b+gpt-11b --cluster a100:32 --gbs 64 --mbs 2 --tp 4 --pp 4 "
                           "--vpp 2 --encoder-tp 2 --seq 1024 --distributed-optimizer --sp --json";
  const Result r = run(args + " --trace " + trace);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"iteration_seconds", "mfu", "hfu", "bubble_fraction", "breakdown", "peak_memory_bytes",
                          "oom", "devices", "streams", "events", "model", "timing"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["devices"], 32);
  EXPECT_EQ(j["peak_memory_bytes"].size(), 4u);
  EXPECT_EQ(j["plan"]["micro_batches"], 16);  // 64 / (2 × dp 2)
  // The critical device's time adds up to the iteration.
  double sum = 0;
  for (const auto& [key, value] : j["breakdown"].items()) sum += value.get<double>();
  EXPECT_NEAR(sum, j["iteration_seconds"].get<double>(), 1e-9);
  EXPECT_GT(j["mfu"].get<double>(), 0.05);
  EXPECT_LT(j["mfu"].get<double>(), j["hfu"].get<double>() + 1e-12);
  // Deterministic apart from timing.
  EXPECT_EQ(without_timing(run(args).out), without_timing(r.out));
  // The trace: a compute track per pipeline rank with every forward, and memory counters.
  const auto t = nlohmann::json::parse(slurp(trace));
  int forwards = 0, counters = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "forward") ++forwards;
    if (e["ph"] == "C") ++counters;
  }
  EXPECT_EQ(forwards, 16 * 8);  // 16 micro-batches through 8 virtual stages
  EXPECT_GT(counters, 0);
}

TEST_F(Cli, SimulateASavedScheduleGivesTheSameIteration) {
  const std::string saved = (dir_ / "schedule.json").string();
  const std::string common = "simulate --model gpt-11b --cluster h100:32 --gbs 32 --mbs 1 --json ";
  const Result first = run(common + "--tp 4 --pp 4 --schedule zb-h1 --zero 1 --save-schedule " + saved);
  ASSERT_EQ(first.status, 0) << first.err;
  const Result again = run(common + "--load-schedule " + saved);
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(first.out)["iteration_seconds"], nlohmann::json::parse(again.out)["iteration_seconds"]);
  EXPECT_EQ(nlohmann::json::parse(again.out)["plan"]["schedule"], "zb-h1");
  // A schedule for another batch, and a broken one.
  const Result other = run("simulate --model gpt-11b --cluster h100:32 --gbs 64 --load-schedule " + saved);
  EXPECT_EQ(other.status, 2);
  EXPECT_NE(other.err.find("the schedule runs 16 micro-batches per replica"), std::string::npos) << other.err;
  std::string text = slurp(saved);
  text.replace(text.find("[\"BI\",0,0]"), 10, "[\"BI\",0,9]");
  const std::string broken = write("broken.json", text);
  const Result bad = run(common + "--load-schedule " + broken);
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("broken.json: rank 0"), std::string::npos) << bad.err;
}

// simulate_fuzz mutates these seeds on every model with their layer count; one the simulator refuses (a kernel
// list changed since it was saved, say) leaves its kind of schedule unfuzzed past the reader, so every seed must
// still time on the models it is fuzzed on.
TEST_F(Cli, TheSimulateFuzzSeedsStillSimulate) {
  const std::string seeds = "fuzz/seeds/simulate_fuzz/";
  const std::pair<std::string, std::string> cases[] = {
      {"1f1b.json", "simulate --model gpt-11b --cluster a100:16 --gbs 8 --mbs 1"},
      {"1f1b.json", "simulate --model llama-70b --cluster a100:16 --gbs 8 --mbs 1"},
      {"interleaved.json", "simulate --model gpt-11b --cluster a100:16 --gbs 4 --mbs 1"},
      {"interleaved.json", "simulate --model llama-70b --cluster a100:16 --gbs 4 --mbs 1"},
      {"zb-h1.json", "simulate --model gpt-11b --cluster a100:12 --gbs 6 --mbs 1"},
      {"zb-h1.json", "simulate --model llama-70b --cluster a100:12 --gbs 6 --mbs 1"},
      {"optimus.json", "simulate --model vit-3b+gpt-11b --cluster a100:8 --gbs 4 --mbs 1"},
      {"optimus.json", "simulate --model vit-5b+llama-70b --cluster a100:8 --gbs 4 --mbs 1"},
      {"optimus-recompute.json", "simulate --model vit-3b+gpt-11b --cluster a100:8 --gbs 4 --mbs 1"},
      {"optimus-recompute.json", "simulate --model vit-5b+llama-70b --cluster a100:8 --gbs 4 --mbs 1"},
      {"multitask.json", "multitask --tasks multitask-clip-4 --cluster a100:8"},
      {"multitask-per-task.json", "multitask --tasks multitask-clip-4 --cluster a100:8"},
  };
  std::set<std::string> timed;
  for (const auto& [seed, args] : cases) {
    const Result r = run(args + " --json --load-schedule " + seeds + seed);
    ASSERT_EQ(r.status, 0) << seed << ": " << args << ": " << r.err;
    EXPECT_GT(nlohmann::json::parse(r.out)["iteration_seconds"].get<double>(), 0) << seed << ": " << args;
    timed.insert(seed);
  }
  // And no seed is left out of the table.
  const auto files = std::distance(fs::directory_iterator(fs::path(FULCRUM_SOURCE_DIR) / seeds), fs::directory_iterator{});
  EXPECT_EQ(static_cast<size_t>(files), timed.size());
}

// A schedule the reader and validate() accept but the model refuses (its first encoder layer's forward pass runs
// one of that layer's two kernels) is refused with the file's name, loaded alone or inside a plan file.
TEST_F(Cli, ASchedulesMismatchWithItsModelNamesTheFile) {
  const auto cut_first_kernel_range = [](nlohmann::json& schedule) {
    nlohmann::json& first = schedule["programs"][0][0];  // ["encoder", 0, 0, 0, 0, "forward", 0, 2, ...]
    ASSERT_EQ(first[0], "encoder");
    ASSERT_EQ(first[7], 2);
    first[7] = 1;
  };
  auto schedule = nlohmann::json::parse(slurp(fs::path(FULCRUM_SOURCE_DIR) / "fuzz/seeds/simulate_fuzz/optimus.json"));
  cut_first_kernel_range(schedule);
  const std::string loaded = write("cut.json", schedule.dump());
  const Result simulated =
      run("simulate --model vit-3b+gpt-11b --cluster a100:8 --gbs 4 --mbs 1 --load-schedule " + loaded);
  EXPECT_EQ(simulated.status, 2);
  EXPECT_EQ(simulated.err, "fulcrum: error: " + loaded + ": encoder pipeline 0 micro-batch 0: layer 0's forward pass "
                           "runs 1 of its 2 kernels\n");

  const std::string plan = (dir_ / "plan.json").string(), html = (dir_ / "report.html").string();
  ASSERT_EQ(run("plan --model vit-3b+gpt-11b --cluster a100:8 --gbs 4 --strategy optimus --baseline-config 1,2,4,1,1 "
                "--no-baselines --quiet --out " + plan).status, 0);
  auto edited = nlohmann::json::parse(slurp(plan));
  cut_first_kernel_range(edited["schedule"]);
  const std::string edited_file = write("edited.json", edited.dump());
  const Result reported = run("report --plan " + edited_file + " --out " + html);
  EXPECT_EQ(reported.status, 2);
  EXPECT_EQ(reported.err, "fulcrum: error: " + edited_file + ": schedule: encoder pipeline 0 micro-batch 0: layer 0's "
                          "forward pass runs 1 of its 2 kernels\n");
  EXPECT_FALSE(fs::exists(html));
}

// A plan file's request names a model, cluster, profile and data as they were typed when it was made; one that no
// longer loads where the report runs (a relative path, a preset of a newer build) is the plan file's fault.
TEST_F(Cli, AReportNamesThePlanFileWhoseRequestNoLongerLoads) {
  const std::string plan = (dir_ / "plan.json").string(), html = (dir_ / "report.html").string();
  ASSERT_EQ(run("plan --model gpt-11b --cluster a100:8 --gbs 16 --no-baselines --quiet --out " + plan).status, 0);
  const auto made = nlohmann::json::parse(slurp(plan));
  const std::pair<std::string, std::string> cases[] = {
      {"model", "unknown model 'gpt-12b'"},
      {"data", "gone.json: cannot read"},
  };
  for (const auto& [key, message] : cases) {
    auto edited = made;
    edited["request"][key] = key == "model" ? "gpt-12b" : "gone.json";
    const std::string file = write(key + ".json", edited.dump());
    const Result r = run("report --plan " + file + " --out " + html);
    EXPECT_EQ(r.status, 2) << key;
    EXPECT_EQ(r.err.rfind("fulcrum: error: " + file + ": request: " + message, 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(html)) << key;
  }
}

// A baseline with no plan on the request is shown with the planner's reason; one the request pins to a
// configuration that does not fit in memory is such a baseline, not an error.
TEST_F(Cli, ABaselineThatCannotRunSaysWhy) {
  const Result r = run("plan --model llama-70b --cluster a100:16 --gbs 16 --baseline-config 16,1,1,1,1 --json --quiet");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto megatron = nlohmann::json::parse(r.out)["baselines"]["megatron"];
  ASSERT_FALSE(megatron["fits"].get<bool>()) << megatron;
  EXPECT_EQ(megatron["reason"].get<std::string>().rfind("no configuration of megatron fits in memory (1 tried)", 0), 0u)
      << megatron;
  const Result text = run("plan --model llama-70b --cluster a100:16 --gbs 16 --baseline-config 16,1,1,1,1 --quiet");
  EXPECT_NE(text.out.find("megatron  cannot run: no configuration of megatron fits in memory (1 tried)"),
            std::string::npos) << text.out;
  // More stages than the LLM's blocks: Megatron-LM's even split of the LLM alone cannot cut them, balanced's cut of
  // every block can.
  const Result stages = run("plan --model llava-1.5-7b --cluster a100:8 --gbs 8 --baseline-config 1,1,8,5,1 --json "
                            "--quiet");
  ASSERT_EQ(stages.status, 0) << stages.err;
  const auto both = nlohmann::json::parse(stages.out)["baselines"];
  EXPECT_EQ(both["megatron"]["reason"], "--baseline-config: megatron cuts the LLM's 32 transformer blocks alone, "
                                        "fewer than PP 8 × VPP 5 stages");
  EXPECT_EQ(both["balanced"]["plan"]["pp"], 8) << both["balanced"];
  // ZeRO-3's pure data parallelism over 8 devices has no micro-batch for a global batch of 12.
  const Result zero3 = run("plan --model gpt-11b --cluster a100:8 --gbs 12 --json --quiet");
  ASSERT_EQ(zero3.status, 0) << zero3.err;
  EXPECT_EQ(nlohmann::json::parse(zero3.out)["baselines"]["zero3"]["reason"],
            "zero3 runs data parallelism over all 8 devices: global batch 12 is not divisible by them");
}

TEST_F(Cli, SimulateWithBalancedDataBeatsRandomBatches) {
  const std::string base = "simulate --model internvl-chat-1.5 --cluster a100:64 --gbs 256 --mbs 4 --tp 4 --pp 4 "
                           "--encoder-tp 1 --data data/internvl_sft_1.2M.json --steps 4 --json --batcher ";
  const Result random = run(base + "random");
  const Result balanced = run(base + "fulcrum");
  ASSERT_EQ(random.status, 0) << random.err;
  ASSERT_EQ(balanced.status, 0) << balanced.err;
  const double random_seconds = nlohmann::json::parse(random.out)["data"]["iteration_seconds_mean"];
  const double balanced_seconds = nlohmann::json::parse(balanced.out)["data"]["iteration_seconds_mean"];
  EXPECT_LT(balanced_seconds, random_seconds);
  EXPECT_GT(nlohmann::json::parse(random.out)["breakdown_mean"]["dp_wait"].get<double>(),
            nlohmann::json::parse(balanced.out)["breakdown_mean"]["dp_wait"].get<double>());
}

// Synthetic samples of a dynamic-resolution encoder (Qwen2-VL's) carry --image-tokens patch tokens an item, 1024
// when not given; before, an item was one patch token whatever --image-tokens said.
TEST_F(Cli, SyntheticSamplesOfADynamicResolutionEncoderCarryTheirPatchTokens) {
  const std::string model = "--model data/modelcfg/qwen2_vl_2b_instruct.config.json --cluster a100:8 --gbs 8 --json";
  auto flops = [&](const std::string& command, const std::string& extra) {
    const Result r = run(command + " " + model + " " + extra);
    EXPECT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    return command == "simulate" ? j["model_flops"].get<double>() : j["predicted"]["mfu"].get<double>();
  };
  const double small = flops("simulate", "--image-tokens 64"), large = flops("simulate", "--image-tokens 4096");
  EXPECT_GT(large, 1.5 * small);
  EXPECT_EQ(flops("simulate", ""), flops("simulate", "--image-tokens 1024"));
  EXPECT_GT(flops("simulate", "--images-per-sample 2"), flops("simulate", "--images-per-sample 1"));
  // The planner's synthetic samples alike: its plan's MFU moves with the images' size.
  EXPECT_NE(flops("plan --quiet --no-baselines", "--image-tokens 64"),
            flops("plan --quiet --no-baselines", "--image-tokens 4096"));
}

// MFU and the share of the compute bound take one step's work with its own time, the mean over the sampled steps:
// the first step's FLOPs over the mean time gave 123% of the bound here, a step heavier than the mean.
TEST_F(Cli, PlanMfuAndBoundTakeTheWorkAndTimeOfTheSameSteps) {
  const Result r = run("plan --model internvl-chat-1.5 --cluster a100:64 --gbs 256 --data data/internvl_sft_1.2M.json "
                       "--json --quiet --no-baselines");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const double fraction = j["fraction_of_bound"].get<double>(), mfu = j["predicted"]["mfu"].get<double>();
  EXPECT_GT(fraction, 0.5);
  EXPECT_LE(fraction, 1.0);
  // MFU counts the peak rate, the bound the achievable GEMM rate below it.
  EXPECT_GT(mfu, 0.3);
  EXPECT_LT(mfu, fraction);
}

TEST_F(Cli, PlanFindsAFasterPlanThanTheBaselinesAndWritesIt) {
  const std::string out = (dir_ / "plan.json").string();
  const Result r = run("plan --model vit-3b+gpt-11b --cluster a100:16 --gbs 64 --data data/internvl_sft_1.2M.json "
                       "--json --quiet --out " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"strategy", "plan", "predicted", "baselines", "speedup_vs", "fraction_of_bound", "timing"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* b : {"zero3", "megatron", "balanced"}) {
    ASSERT_TRUE(j["speedup_vs"].contains(b)) << b;
    EXPECT_GE(j["speedup_vs"][b].get<double>(), 1.0) << b;
  }
  EXPECT_GT(j["fraction_of_bound"].get<double>(), 0.05);
  EXPECT_LE(j["fraction_of_bound"].get<double>(), 1.0);
  // The plan file carries a schedule that `fulcrum simulate` runs to the same iteration on one step.
  const auto plan = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(plan["kind"], "plan");
  std::ofstream(dir_ / "schedule.json") << plan["schedule"].dump();
  const auto& p = j["plan"];
  const Result sim = run(fmt::format("simulate --model vit-3b+gpt-11b --cluster a100:16 --gbs 64 --mbs {} --json "
                                     "--load-schedule {}", p["mbs"].get<int>(), (dir_ / "schedule.json").string()));
  ASSERT_EQ(sim.status, 0) << sim.err;
  EXPECT_EQ(nlohmann::json::parse(sim.out)["plan"]["pp"], p["pp"]);
  // The plan file itself loads as the schedule it holds, to the same iteration.
  const Result from_plan = run(fmt::format("simulate --model vit-3b+gpt-11b --cluster a100:16 --gbs 64 --mbs {} "
                                           "--json --load-schedule {}", p["mbs"].get<int>(), out));
  ASSERT_EQ(from_plan.status, 0) << from_plan.err;
  EXPECT_EQ(nlohmann::json::parse(from_plan.out)["iteration_seconds"],
            nlohmann::json::parse(sim.out)["iteration_seconds"]);
  // A plan file is of one job: run for another number format or batch, it is refused, not timed as that job.
  const std::pair<std::string, std::string> other_jobs[] = {
      {fmt::format("--gbs 64 --mbs {} --dtype fp32", p["mbs"].get<int>()),
       "the plan was made for number format bf16, but --dtype gives fp32"},
      {fmt::format("--gbs 128 --mbs {}", p["mbs"].get<int>()), "the plan was made for global batch 64, but --gbs gives 128"},
  };
  for (const auto& [options, message] : other_jobs) {
    const Result other = run("simulate --model vit-3b+gpt-11b --cluster a100:16 " + options + " --load-schedule " + out);
    EXPECT_EQ(other.status, 2) << options;
    EXPECT_EQ(other.err, "fulcrum: error: " + out + ": " + message + "\n");
  }
  // Megatron-LM's arguments: Fulcrum's plan, with every stage holding LLM layers so the layout can say it.
  const Result megatron = run("plan --model vit-3b+gpt-11b --cluster a100:16 --gbs 64 --data "
                              "data/internvl_sft_1.2M.json --no-baselines --quiet --megatron-layout --export megatron");
  ASSERT_EQ(megatron.status, 0) << megatron.err;
  EXPECT_NE(megatron.out.find("--pipeline-model-parallel-layout \"E"), std::string::npos) << megatron.out;
}

// Optimus on the paper's 8-GPU example: the LLM plan pinned, the encoders on their own plan inside its bubbles.
TEST_F(Cli, PlanOptimusPutsTheEncoderInTheLlmsBubbles) {
  const Result r = run("plan --model vit-3b+gpt-11b --cluster h100:8 --gbs 16 --seq 2048 --image-tokens 256 "
                       "--strategy optimus --baseline-config 1,2,4,1,2 --json --quiet");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("optimus")) << r.out;
  const auto& o = j["optimus"];
  for (const char* key : {"encoder_plan", "m", "microbatch_split", "efficiency_coarse", "efficiency_fine",
                          "scheduler_seconds"}) {
    EXPECT_TRUE(o.contains(key)) << key;
  }
  // m encoder pipelines per LLM pipeline: (PP_llm · TP_llm) / (PP_enc · TP_enc), carrying the 8 micro-batches.
  const auto& e = o["encoder_plan"];
  EXPECT_EQ(o["m"].get<int>() * e["pp"].get<int>() * e["tp"].get<int>(), 4 * 2);
  int carried = 0;
  for (const auto& part : o["microbatch_split"]) carried += part.get<int>();
  EXPECT_EQ(carried, 8);
  EXPECT_EQ(o["microbatch_split"].size(), o["m"].get<size_t>());
  EXPECT_GE(o["efficiency_fine"].get<double>(), o["efficiency_coarse"].get<double>());
  EXPECT_LE(o["efficiency_fine"].get<double>(), 1.0);
  // The LLM plan is megatron's, pinned alike: moving the encoder out of its first stage and into bubbles wins.
  EXPECT_EQ(j["plan"]["pp"], 4);
  EXPECT_EQ(j["plan"]["tp"], 2);
  EXPECT_GT(j["speedup_vs"]["megatron"].get<double>(), 1.0);
  EXPECT_LE(o["llm_alone_seconds"].get<double>(), j["predicted"]["iteration_seconds"].get<double>());
  // The same answer again, on one thread.
  const Result again = run("plan --model vit-3b+gpt-11b --cluster h100:8 --gbs 16 --seq 2048 --image-tokens 256 "
                           "--strategy optimus --baseline-config 1,2,4,1,2 --json --quiet --threads 1");
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(without_timing(again.out), without_timing(r.out));
  // Its schedule file holds the whole model with the encoder section; the simulator runs it in the time planned.
  const std::string file = (dir_ / "optimus.json").string();
  const Result saved = run("plan --model vit-3b+gpt-11b --cluster h100:8 --gbs 16 --seq 2048 --image-tokens 256 "
                           "--strategy optimus --baseline-config 1,2,4,1,2 --no-baselines --quiet --out " + file);
  ASSERT_EQ(saved.status, 0) << saved.err;
  const auto plan_file = nlohmann::json::parse(slurp(file));
  ASSERT_TRUE(plan_file["schedule"].contains("encoder"));
  EXPECT_EQ(plan_file["schedule"]["encoder"]["pipelines"], o["m"]);
  // Its summary states the encoders' tensor parallelism as their plan runs it, so its report agrees with it.
  EXPECT_EQ(plan_file["plan"]["encoder_tp"], e["tp"]);
  const Result report = run("report --plan " + file + " --out " + (dir_ / "optimus.html").string());
  EXPECT_EQ(report.status, 0) << report.err;
  const Result sim = run("simulate --model vit-3b+gpt-11b --cluster h100:8 --gbs 16 --mbs 2 --seq 2048 "
                         "--image-tokens 256 --load-schedule " + file + " --json --quiet");
  ASSERT_EQ(sim.status, 0) << sim.err;
  EXPECT_NEAR(nlohmann::json::parse(sim.out)["iteration_seconds"].get<double>(),
              j["predicted"]["iteration_seconds"].get<double>(), 1e-9);
  // The encoders' activations are held from their forward in one bubble to their backward in another: a step
  // with more images needs more memory on every device that runs encoder stages (the LLM's tokens are the same).
  std::vector<double> peaks;
  for (const char* images : {"0", "4"}) {
    const Result step = run("simulate --model vit-3b+gpt-11b --cluster h100:8 --gbs 16 --mbs 2 --seq 2048 "
                            "--image-tokens 256 --images-per-sample " + std::string(images) + " --load-schedule " +
                            file + " --json --quiet");
    ASSERT_EQ(step.status, 0) << step.err;
    const auto per_rank = nlohmann::json::parse(step.out)["peak_memory_bytes"];
    peaks.push_back(*std::min_element(per_rank.begin(), per_rank.end()));
  }
  EXPECT_GT(peaks[1], peaks[0]);
  const Result llm = run("plan --model gpt-11b --cluster h100:8 --gbs 16 --strategy optimus --baseline-config "
                         "1,2,4,1,2 --no-baselines --quiet");
  EXPECT_EQ(llm.status, 2);
  EXPECT_NE(llm.err.find("has no encoder to give its own plan"), std::string::npos) << llm.err;
  EXPECT_TRUE(llm.out.empty()) << llm.out;
}

// Encoders in bubbles recompute their layers where the images' activations, held from each forward to its
// backward, would not fit beside the LLM's: ViT-22B over 8 images a sample on 16 A100s, which megatron's plan
// (the encoder in its first stage, recomputing) fits.
TEST_F(Cli, PlanOptimusRecomputesTheEncodersWhereTheirActivationsWouldNotFit) {
  const std::string job = "plan --model vit-22b+gpt-11b --cluster a100:16 --gbs 32 --images-per-sample 8 --quiet ";
  const Result megatron = run(job + "--strategy megatron --no-baselines --json");
  ASSERT_EQ(megatron.status, 0) << megatron.err;
  // Kept whole, or with the attention's alone recomputed, they do not fit: one line, no plan.
  for (const char* mode : {"none", "selective"}) {
    const Result kept = run(job + "--strategy optimus --no-baselines --encoder-recompute " + mode);
    EXPECT_EQ(kept.status, 2);
    EXPECT_NE(kept.err.find(fmt::format("(their recomputation: {}) a device needs", mode)), std::string::npos)
        << kept.err;
    EXPECT_TRUE(kept.out.empty()) << kept.out;
  }
  const std::string file = (dir_ / "recomputing.json").string();
  const Result r = run(job + "--strategy optimus --no-baselines --json --out " + file);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["optimus"]["encoder_plan"]["recompute"], "full");
  const auto peaks = j["predicted"]["peak_memory_bytes"];
  // Within an A100's usable 75 GiB (what the refusals above measure against).
  EXPECT_LE(*std::max_element(peaks.begin(), peaks.end()), 75.0 * (1 << 30)) << r.out;
  // The schedule says so (every encoder layer with a backward recomputes), and runs in the time planned.
  const auto plan_file = nlohmann::json::parse(slurp(file));
  // ViT-22B's 48 blocks; not its patch embedding or the projector, which keep nothing a recomputation saves.
  const auto& modes = plan_file["schedule"]["recompute"];
  ASSERT_GE(modes.size(), 3u);
  EXPECT_EQ(modes[0], nlohmann::json::array({"none", 1})) << modes;
  EXPECT_EQ(modes[1], nlohmann::json::array({"full", 48})) << modes;
  expect_simulates_as_planned("--model vit-22b+gpt-11b --cluster a100:16 --gbs 32 --images-per-sample 8", file,
                              j["predicted"]["iteration_seconds"].get<double>());
  // The option belongs to encoders in bubbles.
  const Result stages = run(job + "--strategy megatron --encoder-recompute full");
  EXPECT_EQ(stages.status, 2);
  EXPECT_NE(stages.err.find("--encoder-recompute sets the encoder plan of encoders in the LLM's bubbles"),
            std::string::npos) << stages.err;
}

// ViT-22B's state in the first stage of GPT-175B's pipeline overflows every megatron configuration of 64 H100s;
// Optimus spreads it over all 64 devices, so `optimus` plans the LLM alone, as megatron would, with room left for
// the encoders' state, and serves the request.
TEST_F(Cli, PlanOptimusPlansTheLlmAloneWhereMegatronsPlanFitsNowhere) {
  const std::string file = (dir_ / "optimus-alone.json").string();
  const Result r = run("plan --model vit-22b+gpt-175b --cluster h100:64 --gbs 64 --seq 2304 --image-tokens 256 "
                       "--strategy optimus --quiet --json --out " + file);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["baselines"]["megatron"]["fits"].get<bool>());
  EXPECT_NE(j["baselines"]["megatron"]["reason"].get<std::string>().find("fits in memory"), std::string::npos);
  const auto& e = j["optimus"]["encoder_plan"];
  // Every device holds an encoder stage: DP_enc · PP_enc · TP_enc = 64.
  EXPECT_EQ(e["dp"].get<int>() * e["pp"].get<int>() * e["tp"].get<int>(), 64);
  const auto peaks = j["predicted"]["peak_memory_bytes"];
  EXPECT_LE(*std::max_element(peaks.begin(), peaks.end()), 75.0 * (1 << 30)) << r.out;
  // The file it wrote runs in the simulator as planned.
  const auto plan_file = nlohmann::json::parse(slurp(file));
  ASSERT_TRUE(plan_file["schedule"].contains("encoder"));
  expect_simulates_as_planned("--model vit-22b+gpt-175b --cluster h100:64 --gbs 64 --seq 2304 --image-tokens 256",
                              file, j["predicted"]["iteration_seconds"].get<double>());
}

// Optimus schedules the planner once made wrong: a step without images, where the encoders' no-op passes sat
// inside the LLM forward that waits on them (a deadlock), and two encoders, whose last stage ran the first
// encoder's projector after the second encoder. Each is written, loads, and times as planned.
TEST_F(Cli, OptimusSchedulesOfAStepWithoutImagesAndOfTwoEncodersLoadAndRunAsPlanned) {
  const std::string roomy = write("roomy.json", R"({"fulcrum": 1, "preset": "h100:8", "device": {"memory_bytes": 300e9}})");
  const std::pair<std::string, std::string> shapes[] = {
      {"vit-3b+gpt-11b", "--cluster h100:8 --images-per-sample 0"},
      {"vit-3b+vit-5b+gpt-11b", "--cluster " + roomy + " --encoder-pp 2"},
  };
  for (const auto& [model, extra] : shapes) {
    SCOPED_TRACE(model);
    const std::string file = (dir_ / "bubbles.json").string();
    const Result planned = run("plan --model " + model + " --gbs 16 --strategy optimus --baseline-config 1,2,4,1,2 "
                               "--no-baselines --quiet --json " + extra + " --out " + file);
    ASSERT_EQ(planned.status, 0) << planned.err;
    const std::string cluster = extra.substr(0, extra.find(' ', std::string("--cluster ").size()));
    const std::string images = extra.find("--images-per-sample 0") != std::string::npos ? " --images-per-sample 0" : "";
    const Result sim = run("simulate --model " + model + " " + cluster + " --gbs 16 --mbs 2" + images +
                           " --load-schedule " + file + " --json --quiet");
    ASSERT_EQ(sim.status, 0) << sim.err;
    EXPECT_NEAR(nlohmann::json::parse(sim.out)["iteration_seconds"].get<double>(),
                nlohmann::json::parse(planned.out)["predicted"]["iteration_seconds"].get<double>(), 1e-9);
  }
}

// Spindle's plan of a multi-task model: waves, the relaxation's bound, the baselines, on every run the same.
TEST_F(Cli, MultitaskPlansWavesAgainstTheBaselines) {
  const std::string args = "multitask --tasks multitask-clip-4 --cluster a800:16 --json";
  const Result r = run(args);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"iteration_seconds", "makespan_seconds", "lower_bound_seconds", "compute_seconds", "waves",
                          "baselines", "speedup_vs_sequential", "timing"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_GE(j["makespan_seconds"].get<double>(), j["lower_bound_seconds"].get<double>() * (1 - 1e-9));
  EXPECT_GE(j["wavefront_makespan_seconds"].get<double>(), j["lower_bound_seconds"].get<double>() * (1 - 1e-9));
  EXPECT_GE(j["iteration_seconds"].get<double>(), j["compute_seconds"].get<double>());
  for (const char* b : {"sequential", "per_task", "task_greedy"}) {
    EXPECT_GT(j["baselines"][b]["iteration_seconds"].get<double>(), 0) << b;
  }
  EXPECT_NEAR(j["speedup_vs_sequential"].get<double>(),
              j["baselines"]["sequential"]["iteration_seconds"].get<double>() / j["iteration_seconds"].get<double>(),
              1e-9);
  // Every arrangement has been simulated, so the one kept is never slower than a baseline that fits (than
  // `sequential`, and within the 1% by which another arrangement must beat it to replace it, than the others).
  auto never_slower_than_a_baseline = [](const nlohmann::json& plan) {
    for (const char* b : {"sequential", "per_task", "task_greedy"}) {
      const auto& base = plan["baselines"][b];
      if (base["fits"].get<bool>() || !plan["fits"].get<bool>()) {
        EXPECT_LE(plan["iteration_seconds"].get<double>(),
                  base["iteration_seconds"].get<double>() * (std::string(b) == "sequential" ? 1 : 1.01))
            << b;
      }
    }
  };
  never_slower_than_a_baseline(j);
  EXPECT_TRUE(j.contains("planner_arrangement"));
  ASSERT_FALSE(j["waves"].empty());
  // A wave holds each device once, except where a per-task arrangement (`per-task`, `task-greedy`) is kept: there
  // a task runs its components in turn on its devices, and their slices fit the wave one after another.
  const std::string kept = j["arrangement"].get<std::string>();
  const bool in_turn = kept == "per-task" || kept == "task-greedy";
  for (const auto& w : j["waves"]) {
    std::map<int, double> busy_seconds;
    std::map<int, std::string> task_of;
    for (const auto& s : w["slices"]) {
      for (const auto& d : s["devices"]) {
        const auto [it, first] = task_of.emplace(d.get<int>(), s["task"].get<std::string>());
        EXPECT_TRUE(first || (in_turn && it->second == s["task"].get<std::string>()))
            << "device " << d.get<int>() << " twice in a wave of " << kept;
        busy_seconds[d.get<int>()] += s["seconds"].get<double>();
      }
    }
    EXPECT_LE(busy_seconds.size(), 16u);
    for (const auto& [device, seconds] : busy_seconds) {
      EXPECT_LE(seconds, w["seconds"].get<double>() * (1 + 1e-9)) << "device " << device << " over its wave";
    }
  }
  EXPECT_GE(j["timing"]["planner_seconds"].get<double>(), 0);
  // The iteration is the simulator's run of the waves' schedule: never shorter than their compute.
  EXPECT_GT(j["estimate"]["iteration_seconds"].get<double>(), 0);
  EXPECT_GT(j["mfu"].get<double>(), 0);
  EXPECT_EQ(without_timing(run(args).out), without_timing(r.out));
  // Its schedule and timeline, written on request.
  const std::string trace = (dir_ / "waves_trace.json").string(), schedule = (dir_ / "waves.json").string();
  const Result saved = run("multitask --tasks multitask-clip-4 --cluster a800:16 --json --trace " + trace +
                           " --save-schedule " + schedule);
  ASSERT_EQ(saved.status, 0) << saved.err;
  EXPECT_FALSE(nlohmann::json::parse(slurp(trace))["traceEvents"].empty());
  EXPECT_TRUE(nlohmann::json::parse(slurp(schedule)).contains("tasks"));
  // A baseline's schedule on request: `sequential` runs every slice on all 16 devices.
  const std::string sequential = (dir_ / "sequential.json").string();
  const Result baseline = run("multitask --tasks multitask-clip-4 --cluster a800:16 --schedule-of sequential "
                              "--save-schedule " + sequential);
  ASSERT_EQ(baseline.status, 0) << baseline.err;
  const auto slices = nlohmann::json::parse(slurp(sequential))["tasks"]["slices"];
  ASSERT_FALSE(slices.empty());
  for (const auto& s : slices) EXPECT_EQ(s[10].size(), 16u) << s.dump();
  EXPECT_NE(run("multitask --tasks multitask-clip-4 --cluster a800:16 --schedule-of nothing").status, 0);
  // On 8 devices ten CLIP tasks run fastest one operator after another on all of them: the planner's own
  // arrangement simulates slower, and the sequential baseline is what is kept, with its waves and its time.
  const Result small = run("multitask --tasks multitask-clip-10 --cluster a800:8 --json");
  ASSERT_EQ(small.status, 0) << small.err;
  const auto k = nlohmann::json::parse(small.out);
  never_slower_than_a_baseline(k);
  EXPECT_EQ(k["arrangement"], "sequential");
  EXPECT_NE(k["planner_arrangement"], "sequential");
  EXPECT_DOUBLE_EQ(k["iteration_seconds"].get<double>(),
                   k["baselines"]["sequential"]["iteration_seconds"].get<double>());
  EXPECT_DOUBLE_EQ(k["speedup_vs_sequential"].get<double>(), 1.0);
  for (const auto& w : k["waves"]) {
    for (const auto& s : w["slices"]) EXPECT_EQ(s["devices"].size(), 8u) << s.dump();
  }
  // On one device every arrangement is the same work in another order: none beats `sequential` by the 1% it
  // must, so `sequential` is kept and the speed-up is exactly 1.
  const Result one = run("multitask --tasks multitask-clip-4 --cluster a800:1 --json");
  ASSERT_EQ(one.status, 0) << one.err;
  const auto alone = nlohmann::json::parse(one.out);
  EXPECT_EQ(alone["arrangement"], "sequential");
  EXPECT_DOUBLE_EQ(alone["speedup_vs_sequential"].get<double>(), 1.0);
  for (const char* b : {"per_task", "task_greedy"}) {
    EXPECT_GT(alone["baselines"][b]["iteration_seconds"].get<double>(),
              0.99 * alone["baselines"]["sequential"]["iteration_seconds"].get<double>())
        << b;
  }
  const Result text = run("multitask --tasks qwen-val --cluster a800:32");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("wavefront makespan"), std::string::npos) << text.out;
}

// The planner ranks its arrangements (waves, every level's MetaOps in turn at their fastest or widest counts) by an
// estimate that knows no recomputation, which memory calls for only once an arrangement is simulated: each of them
// is simulated, and the fastest that fits is the plan, with its own levels. On QWen-VAL on 24 A800s the estimate's
// pick (every level at its widest counts) simulates 12% slower than the waves (4.62 s against 4.12 s).
TEST_F(Cli, MultitaskSimulatesEveryArrangementThePlannerMade) {
  for (const char* cluster : {"a800:24", "a800:16"}) {
    const std::string args = fmt::format("multitask --tasks qwen-val --cluster {} --json", cluster);
    const Result r = run(args);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    const auto& made = j["planner_arrangements"];
    ASSERT_EQ(made.size(), 3u) << args;
    double fastest = std::numeric_limits<double>::infinity();
    for (const char* name : {"waves", "fastest", "widest"}) {
      ASSERT_TRUE(made.contains(name)) << args << ": " << name;
      if (made[name]["fits"].get<bool>()) fastest = std::min(fastest, made[name]["iteration_seconds"].get<double>());
    }
    ASSERT_TRUE(j["fits"].get<bool>()) << args;
    const double kept = j["iteration_seconds"].get<double>();
    const double sequential = j["baselines"]["sequential"]["iteration_seconds"].get<double>();
    // The fastest of them, or a baseline faster still; `sequential` within the 1% another must beat it by.
    if (j["arrangement"] == "sequential") {
      EXPECT_LE(kept * 0.99, fastest) << args;
    } else {
      EXPECT_LE(kept, fastest) << args;
      EXPECT_LT(kept, sequential * 0.99) << args;
    }
    // The levels are the planner's fastest arrangement's, the one kept where a baseline is not: a level whose
    // MetaOps run in turn has one slice a wave.
    ASSERT_TRUE(made.contains(j["levels_of"].get<std::string>())) << args;
    for (const auto& [name, arrangement] : made.items()) {
      if (arrangement["fits"].get<bool>()) {
        EXPECT_LE(made[j["levels_of"].get<std::string>()]["iteration_seconds"].get<double>(),
                  arrangement["iteration_seconds"].get<double>()) << args << ": " << name;
      }
    }
    if (made.contains(j["arrangement"].get<std::string>())) {
      EXPECT_EQ(j["levels_of"], j["arrangement"]) << args;
      for (const auto& w : j["waves"]) {
        if (j["levels"][w["level"].get<size_t>()]["serial"].get<bool>()) {
          EXPECT_EQ(w["slices"].size(), 1u) << args << ": a wave of serial level " << w["level"];
        }
      }
    }
    if (std::string(cluster) == "a800:24") {
      EXPECT_LT(kept, made[j["planner_arrangement"].get<std::string>()]["iteration_seconds"].get<double>() * 0.95)
          << args << ": the estimate's pick was kept though another simulates faster";
    }
  }
}

// A frozen component passes its input's gradient back only for a trained one upstream: the planner's estimate
// and the simulator agree on it (a frozen LLM after a trained tower was estimated at half its simulated time), and
// a frozen tower nothing trained feeds has no backward at all.
TEST_F(Cli, MultitaskFrozenComponentsPassGradientsBackOnlyForTrainedOnesUpstream) {
  auto graph = [&](const std::string& trainable) {
    const Result model = run("model --model llava-1.5-7b --json --trainable " + trainable);
    EXPECT_EQ(model.status, 0) << model.err;
    const nlohmann::json doc{{"fulcrum", 1}, {"kind", "tasks"}, {"name", "vl"},
                             {"model", nlohmann::json::parse(model.out)},
                             {"tasks", {{{"name", "vl"}, {"batch", 64}, {"nodes", {
                                 {{"name", "image"}, {"component", "vision"}, {"tokens", 577}},
                                 {{"name", "proj"}, {"component", "projector"}, {"tokens", 576}, {"inputs", {"image"}}},
                                 {{"name", "llm"}, {"component", "llm"}, {"tokens", 1024}, {"inputs", {"proj"}}}}}}}}};
    return write(trainable.substr(0, trainable.find(' ')) + ".json", doc.dump());
  };
  std::map<std::string, double> simulated;
  for (const std::string trainable : {"vision projector llm", "vision projector", "projector llm"}) {
    const Result r = run("multitask --tasks " + graph(trainable) + " --cluster a800:8 --json");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    simulated[trainable] = j["iteration_seconds"].get<double>();
    EXPECT_NEAR(j["estimate"]["iteration_seconds"].get<double>(), simulated[trainable], 0.03 * simulated[trainable])
        << trainable;
  }
  // Freezing the LLM saves its weight gradients only; freezing the tower, its whole backward.
  EXPECT_LT(simulated["vision projector"], simulated["vision projector llm"]);
  EXPECT_LT(simulated["projector llm"], simulated["vision projector llm"]);
}

// A saved schedule whose slices run a layer before the layer it takes its input from is refused, naming both:
// the saved schedule on one device with the first and last layers of a tower swapped covers every layer still.
TEST_F(Cli, MultitaskRefusesASavedScheduleRunningALayerBeforeItsInput) {
  const std::string args = "multitask --tasks multitask-clip-4 --cluster a800:1";
  const std::string file = (dir_ / "one.json").string();
  ASSERT_EQ(run(args + " --save-schedule " + file).status, 0);
  auto schedule = nlohmann::json::parse(slurp(file));
  auto& slices = schedule["tasks"]["slices"];
  ASSERT_GE(slices.size(), 3u);
  // Slices 0 and 2: the vision tower's patch embedding (layer 0) and final norm (layer 33) of the first task.
  ASSERT_EQ(slices[0][2], 0);
  ASSERT_EQ(slices[0][3], 1);
  ASSERT_EQ(slices[2][3], 1);
  std::swap(slices[0][2], slices[2][2]);
  std::ofstream(dir_ / "swapped.json") << schedule.dump();
  const Result r = run(args + " --load-schedule " + (dir_ / "swapped.json").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("swapped.json: slice 1 runs layer 1 of 'vision' for task 'vision-text' in wave 1, before its "
                       "input, layer 0 of 'vision' in slice 2 (wave 2)"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty());

  // A slice that says it has no backward though it trains: its backward would be left out of the timing.
  auto frozen = nlohmann::json::parse(slurp(file));
  frozen["tasks"]["slices"][1].push_back(0);
  std::ofstream(dir_ / "no_backward.json") << frozen.dump();
  const Result no_backward = run(args + " --load-schedule " + (dir_ / "no_backward.json").string());
  EXPECT_EQ(no_backward.status, 2);
  EXPECT_NE(no_backward.err.find("no_backward.json: slice 1 says its backward does not pass back its input's "
                                 "gradient"), std::string::npos) << no_backward.err;

  // In one wave on the same devices, the order is the programs': a task-greedy wave runs a task's chain there,
  // and programs that run the tower's blocks before its patch embedding run a layer before its input.
  const std::string greedy = (dir_ / "greedy.json").string();
  ASSERT_EQ(run("multitask --tasks multitask-clip-4 --cluster a800:8 --schedule-of task-greedy --save-schedule " +
                greedy).status, 0);
  auto reordered = nlohmann::json::parse(slurp(greedy));
  ASSERT_EQ(reordered["tasks"]["slices"][0][9], reordered["tasks"]["slices"][1][9]);  // one wave
  int swapped = 0;
  for (auto& program : reordered["programs"]) {
    for (const char* op : {"F", "B"}) {
      auto first = program.end(), second = program.end();
      for (auto it = program.begin(); it != program.end(); ++it) {
        if ((*it)[0] == op && (*it)[1] == 0) first = it;
        if ((*it)[0] == op && (*it)[1] == 1) second = it;
      }
      if (first != program.end() && second != program.end()) {
        std::iter_swap(first, second);
        ++swapped;
      }
    }
  }
  ASSERT_GT(swapped, 0);
  std::ofstream(dir_ / "reordered.json") << reordered.dump();
  const Result out_of_order =
      run("multitask --tasks multitask-clip-4 --cluster a800:8 --load-schedule " + (dir_ / "reordered.json").string());
  EXPECT_EQ(out_of_order.status, 2) << out_of_order.out;
  EXPECT_NE(out_of_order.err.find("before its input"), std::string::npos) << out_of_order.err;
}

// A saved schedule must move each slice's input to it where the devices change, run a chain of slices on the same
// devices in order both ways, keep each task's micro-batches, and give each of two nodes that run a frozen
// component alike the backward its own inputs call for: edited otherwise, it is refused in one line.
TEST_F(Cli, MultitaskRefusesASavedScheduleWhoseDataDoesNotFlowAsItsTasksSay) {
  const std::string clip = "multitask --tasks multitask-clip-4 --cluster a800:16";
  const std::string saved = (dir_ / "c4.json").string();
  ASSERT_EQ(run(clip + " --save-schedule " + saved).status, 0);
  ASSERT_EQ(run(clip + " --load-schedule " + saved).status, 0);
  auto refused = [&](const std::string& args, const std::string& name, const nlohmann::json& doc,
                     const std::string& message) {
    const std::string file = write(name, doc.dump());
    const Result r = run(args + " --load-schedule " + file);
    EXPECT_EQ(r.status, 2) << name << ": " << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << name << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << name << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << name;
  };
  // Every transfer taken out: the sends and receives still match, but no slice receives the rows it takes.
  auto no_transfers = nlohmann::json::parse(slurp(saved));
  for (auto& program : no_transfers["programs"]) {
    nlohmann::json kept = nlohmann::json::array();
    for (const auto& in : program) {
      if (in[0] != "send" && in[0] != "recv") kept.push_back(in);
    }
    program = kept;
  }
  refused(clip, "no_transfers.json", no_transfers, "receives no activations from it");
  // Slice 0 over one layer more: the layer it takes from the next slice is run twice.
  auto longer = nlohmann::json::parse(slurp(saved));
  longer["tasks"]["slices"][0][3] = 2;
  refused(clip, "longer.json", longer,
          "of 'vision' in 1 micro-batch of 256 sequences of 257 tokens, which task 'vision-text' does not run again");
  // The first slice's rows as 2 micro-batches of half as many sequences: another activation memory and time.
  auto halves = nlohmann::json::parse(slurp(saved));
  halves["tasks"]["slices"][0][4] = 128;
  halves["tasks"]["slices"][0][6] = 2;
  refused(clip, "halves.json", halves,
          "slice 0 runs layer 0 of 'vision' in 2 micro-batches of 128 sequences of 257 tokens, which task "
          "'vision-text' does not run");

  // A task-greedy wave runs a task's chain of slices on its devices: its forwards in order on every device (not
  // only the first), its backwards in reverse.
  const std::string greedy_args = "multitask --tasks multitask-clip-4 --cluster a800:8";
  const std::string greedy = (dir_ / "greedy.json").string();
  ASSERT_EQ(run(greedy_args + " --schedule-of task-greedy --save-schedule " + greedy).status, 0);
  auto swapped_on = [&](const char* op, bool every_device) {
    auto doc = nlohmann::json::parse(slurp(greedy));
    EXPECT_EQ(doc["tasks"]["slices"][0][9], doc["tasks"]["slices"][1][9]);  // one wave
    EXPECT_EQ(doc["tasks"]["slices"][0][10], doc["tasks"]["slices"][1][10]);  // the same devices
    const auto& devices = doc["tasks"]["slices"][0][10];
    for (size_t k = every_device ? 0 : devices.size() - 1; k < devices.size(); ++k) {
      auto& program = doc["programs"][devices[k].get<int>()];
      auto first = program.end(), second = program.end();
      for (auto it = program.begin(); it != program.end(); ++it) {
        if ((*it)[0] == op && (*it)[1] == 0) first = it;
        if ((*it)[0] == op && (*it)[1] == 1) second = it;
      }
      EXPECT_TRUE(first != program.end() && second != program.end());
      std::iter_swap(first, second);
    }
    return doc;
  };
  refused(greedy_args, "forward_on_one.json", swapped_on("F", false), "before its input");
  refused(greedy_args, "backward.json", swapped_on("B", true), "before its input");

  // LLaVA's LLM frozen and run twice by one task on the same inputs: after the trained projector (its backward
  // passes the gradient back) and on its own (no backward). Every LLM slice saying the same is refused.
  const Result model = run("model --model llava-1.5-7b --json --trainable projector");
  ASSERT_EQ(model.status, 0) << model.err;
  const nlohmann::json tasks{{"fulcrum", 1}, {"kind", "tasks"}, {"name", "twice"},
                             {"model", nlohmann::json::parse(model.out)},
                             {"tasks", {{{"name", "t"}, {"batch", 64}, {"nodes", {
                                 {{"name", "v"}, {"component", "vision"}, {"tokens", 577}},
                                 {{"name", "p"}, {"component", "projector"}, {"tokens", 576}, {"inputs", {"v"}}},
                                 {{"name", "after"}, {"component", "llm"}, {"tokens", 1024}, {"inputs", {"p"}}},
                                 {{"name", "alone"}, {"component", "llm"}, {"tokens", 1024}}}}}}}};
  const std::string twice_args = "multitask --tasks " + write("twice.json", tasks.dump()) + " --cluster a800:8";
  const std::string twice = (dir_ / "twice_schedule.json").string();
  ASSERT_EQ(run(twice_args + " --schedule-of sequential --save-schedule " + twice).status, 0);
  ASSERT_EQ(run(twice_args + " --load-schedule " + twice).status, 0);
  const int llm = 2;  // the model's components: vision, projector, llm
  for (const int gradient : {0, 1}) {
    auto doc = nlohmann::json::parse(slurp(twice));
    for (auto& slice : doc["tasks"]["slices"]) {
      if (slice[1] != llm) continue;
      if (slice.size() < 12) slice.push_back(gradient);
      slice[11] = gradient;
    }
    refused(twice_args, fmt::format("llm_gradient_{}.json", gradient), doc,
            fmt::format("{} of the slices running layer 0 of 'llm' for task 't' pass its input's gradient back, but 1 "
                        "of the task's 2 nodes running it so do", gradient ? 2 : 0));
  }
}

// A task whose every component is frozen trains nothing: planned and timed as asked, with a warning saying so.
TEST_F(Cli, MultitaskWarnsOfATaskThatTrainsNothing) {
  const Result model = run("model --model llava-1.5-7b --json --trainable projector");
  ASSERT_EQ(model.status, 0) << model.err;
  const nlohmann::json tasks{{"fulcrum", 1}, {"kind", "tasks"}, {"name", "mixed"},
                             {"model", nlohmann::json::parse(model.out)},
                             {"tasks", {{{"name", "vl"}, {"batch", 16}, {"nodes", {
                                            {{"name", "v"}, {"component", "vision"}, {"tokens", 577}},
                                            {{"name", "p"}, {"component", "projector"}, {"tokens", 576},
                                             {"inputs", {"v"}}}}}},
                                        {{"name", "text"}, {"batch", 16}, {"nodes", {
                                            {{"name", "l"}, {"component", "llm"}, {"tokens", 512}}}}}}}};
  const std::string file = write("mixed.json", tasks.dump());
  const Result r = run("multitask --tasks " + file + " --cluster a800:8 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("mixed.json: task 'text' trains nothing (every component it runs is frozen)"),
            std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("task 'vl'"), std::string::npos) << r.err;
}

// A saved schedule simulated again gives the iteration the plan reported for it, and moves with the costs it is
// timed under: what a measured run of it is compared against when the costs were measured after it was planned.
TEST_F(Cli, MultitaskSimulatesASavedSchedule) {
  const std::string plan_args = "multitask --tasks multitask-clip-4 --cluster a800:16 --json";
  const Result plan = run(plan_args);
  ASSERT_EQ(plan.status, 0) << plan.err;
  const auto planned = nlohmann::json::parse(plan.out);
  const std::pair<std::string, double> arrangements[] = {
      {"plan", planned["iteration_seconds"].get<double>()},
      {"sequential", planned["baselines"]["sequential"]["iteration_seconds"].get<double>()},
      {"task-greedy", planned["baselines"]["task_greedy"]["iteration_seconds"].get<double>()}};
  for (const auto& [which, seconds] : arrangements) {
    const std::string file = (dir_ / (which + ".schedule.json")).string();
    ASSERT_EQ(run(plan_args + " --schedule-of " + which + " --save-schedule " + file).status, 0) << which;
    const Result loaded = run("multitask --tasks multitask-clip-4 --cluster a800:16 --json --load-schedule " + file);
    ASSERT_EQ(loaded.status, 0) << which << ": " << loaded.err;
    const auto j = nlohmann::json::parse(loaded.out);
    EXPECT_DOUBLE_EQ(j["iteration_seconds"].get<double>(), seconds) << which;
    EXPECT_EQ(j["schedule_file"], file);
  }
  // The same schedule on devices of half the matmul rate takes longer, and less than twice as long (the
  // gradient all-reduces and the optimizer step do not slow down).
  const fs::path slow = dir_ / "slow.json";
  std::ofstream(slow) << R"({"fulcrum": 1, "preset": "a800:16", "device": {"bf16_flops_per_second": 156e12}})";
  const std::string file = (dir_ / "plan.schedule.json").string();
  const Result slower =
      run("multitask --tasks multitask-clip-4 --json --load-schedule " + file + " --cluster " + slow.string());
  ASSERT_EQ(slower.status, 0) << slower.err;
  const double fast_seconds = arrangements[0].second;
  const double slow_seconds = nlohmann::json::parse(slower.out)["iteration_seconds"].get<double>();
  EXPECT_GT(slow_seconds, 1.2 * fast_seconds);
  EXPECT_LT(slow_seconds, 2.0 * fast_seconds);
}

// The sequential arrangement's sync groups, one per backward wave, pooled into buckets of 25 MiB a device by
// default: fewer all-reduces over the same layers, every one of them still synchronised and the schedule valid
// (--save-schedule validates what it writes).
TEST_F(Cli, MultitaskSyncGroupsShareBuckets) {
  const std::string args = "multitask --tasks multitask-clip-4 --cluster a800:8 --json --schedule-of sequential";
  auto groups_of = [&](const std::string& extra) {
    const std::string file = (dir_ / "buckets.json").string();
    const Result r = run(args + extra + " --save-schedule " + file);
    EXPECT_EQ(r.status, 0) << r.err;
    const auto schedule = nlohmann::json::parse(slurp(file));
    std::vector<std::set<std::pair<int, int>>> out;
    for (const auto& g : schedule["tasks"]["sync_groups"]) {
      std::set<std::pair<int, int>> layers;
      for (const auto& l : g["layers"]) layers.insert({l[0].get<int>(), l[1].get<int>()});
      out.push_back(layers);
    }
    return out;
  };
  const auto one_each = groups_of(" --bucket-mb 0");
  const auto bucketed = groups_of("");
  EXPECT_LT(bucketed.size(), one_each.size());
  std::set<std::pair<int, int>> all_one_each, all_bucketed;
  for (const auto& g : one_each) all_one_each.insert(g.begin(), g.end());
  for (const auto& g : bucketed) all_bucketed.insert(g.begin(), g.end());
  EXPECT_EQ(all_bucketed, all_one_each);
}

// --zero 0 keeps the whole optimizer state on every device that holds a layer (a plain optimizer per rank):
// the sequential arrangement, every layer on all 16 devices, then steps 16 times the parameters a device steps
// under ZeRO-1, and holds more.
TEST_F(Cli, MultitaskOptimizerStateWholeOrSharded) {
  const std::string args = "multitask --tasks multitask-clip-4 --cluster a800:16 --json --schedule-of sequential";
  const std::string zero0_file = (dir_ / "zero0.json").string();
  const Result zero1 = run(args);
  const Result zero0 = run(args + " --zero 0 --save-schedule " + zero0_file);
  ASSERT_EQ(zero1.status, 0) << zero1.err;
  ASSERT_EQ(zero0.status, 0) << zero0.err;
  const auto sharded = nlohmann::json::parse(zero1.out)["baselines"]["sequential"];
  const auto whole = nlohmann::json::parse(zero0.out)["baselines"]["sequential"];
  EXPECT_GT(whole["iteration_seconds"].get<double>(), sharded["iteration_seconds"].get<double>());
  EXPECT_GT(whole["peak_memory_bytes"].get<double>(), sharded["peak_memory_bytes"].get<double>());
  const auto schedule = nlohmann::json::parse(slurp(zero0_file));
  EXPECT_EQ(schedule["layout"]["state_sharding"], "zero-0");
}

// Spindle's target for its wavefront: within 7% of the relaxation's bound. Multitask-CLIP's ten tasks on 16
// and 32 A800s, whose towers' curves stop scaling early, and QWen-VAL on 32, whose LLMs' 16-device counts cross
// two nodes with no valid count between 16 and 32, are the hard cases (the waves aligned to their shortest part
// alone came to +7.4% and +11.9%; QWen-VAL's levels packed without the configuration program to +10.6%).
TEST_F(Cli, MultitaskWavefrontStaysNearItsBound) {
  for (const char* tasks_and_cluster : {"multitask-clip-10 --cluster a800:16", "multitask-clip-10 --cluster a800:32",
                                        "qwen-val --cluster a800:32"}) {
    const Result r = run(std::string("multitask --json --tasks ") + tasks_and_cluster);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_LE(j["wavefront_makespan_seconds"].get<double>(), 1.07 * j["lower_bound_seconds"].get<double>())
        << tasks_and_cluster;
  }
}

// Yi-34B on 8 A800s: its blocks copied by data parallelism over all 8 would keep 34B parameters' gradients and
// weights (4 bytes each, about 138 GB) on every device, more than its 75 GiB hold, so no arrangement with the blocks
// split as the curves find fastest fits. The planner raises the least tensor parallelism of copied blocks until
// one does, as a Megatron-LM user raises --tensor-model-parallel-size.
TEST_F(Cli, MultitaskRaisesTensorParallelismUntilThePlanFits) {
  const fs::path tasks = dir_ / "yi.json";
  std::ofstream(tasks) << R"({"fulcrum": 1, "kind": "tasks", "name": "yi", "model": "yi-34b", "tasks": [
      {"name": "text", "batch": 32, "nodes": [{"name": "text", "component": "yi-34b", "tokens": 2048}]}]})";
  const Result r = run("multitask --tasks " + tasks.string() + " --cluster a800:8 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_LE(j["peak_memory_bytes"].get<double>(), j["usable_memory_bytes"].get<double>());
  const int min_tp = j["min_tp"].get<int>();
  EXPECT_GT(min_tp, 1);
  int block_slices = 0;
  for (const auto& wave : j["waves"]) {
    for (const auto& slice : wave["slices"]) {
      const int first = slice["layers"][0].get<int>(), end = slice["layers"][1].get<int>();
      if (first < 1 || end > 61) continue;  // the embedding, the final norm and the output layer run whole
      ++block_slices;
      if (slice["dp"].get<int>() > 1) {
        EXPECT_GE(slice["tp"].get<int>(), min_tp) << slice.dump();
      }
    }
  }
  EXPECT_GT(block_slices, 0);
  // The arrangements the planner compares are made with the same floor, and fit too (or say they do not).
  EXPECT_TRUE(j["baselines"]["sequential"]["fits"].get<bool>());
}

// QWen-VAL with a 32B LLM on 256 A800s: at tensor-parallel floor 2 the waves fit and `sequential` does not (80.8 GB
// against 80.5 GB usable). Its users would raise tensor parallelism until it fits, so the floors go on until it does,
// and the plan is compared with a `sequential` that runs.
TEST_F(Cli, MultitaskComparesThePlanWithASequentialThatFits) {
  const Result r = run("multitask --tasks qwen-val-30b --cluster a800:256 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_TRUE(j["baselines"]["sequential"]["fits"].get<bool>());
  EXPECT_GE(j["min_tp"].get<int>(), 4);
}

// LLaVA-1.5's two tasks (the README's task graph) on 8 A800s fit only with most blocks recomputed fully. The
// planner's curves time passes without recomputation, so an estimate left at that was a fifth short of the
// simulated iteration (4.75 s against 5.89 s); made again with the recomputation the kept arrangement takes, it
// lies within 5% of it, as where nothing is recomputed, and says how much of it is recomputation.
TEST_F(Cli, MultitaskEstimateCarriesTheRecomputationMemoryCallsFor) {
  const std::string tasks = write("two.json", R"({"fulcrum": 1, "kind": "tasks", "name": "two",
 "model": "llava-1.5-7b",
 "tasks": [{"name": "vl", "batch": 64, "micro_batches": 1,
            "nodes": [{"name": "image", "component": "vision", "tokens": 577, "items_per_sample": 2},
                      {"name": "proj", "component": "projector", "tokens": 576, "items_per_sample": 2,
                       "inputs": ["image"]},
                      {"name": "llm", "component": "llm", "tokens": 1024, "inputs": ["proj"]}]},
           {"name": "text", "batch": 64, "micro_batches": 1,
            "nodes": [{"name": "llm", "component": "llm", "tokens": 2048}]}]})");
  const Result r = run("multitask --tasks " + tasks + " --cluster a800:8 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_NE(j["recompute"], "none");
  const double simulated = j["iteration_seconds"].get<double>();
  const double estimate = j["estimate"]["iteration_seconds"].get<double>();
  EXPECT_GT(j["estimate"]["recompute_seconds"].get<double>(), 0.05 * simulated);
  EXPECT_NEAR(estimate, simulated, 0.05 * simulated);
  EXPECT_EQ(j["compute_seconds"], j["estimate"]["compute_seconds"]);
  // Every estimate, the plan's and each baseline's, is its compute, transfers and exposed gradient all-reduces.
  auto expect_whole = [](const nlohmann::json& e, const char* of) {
    EXPECT_NEAR(e["iteration_seconds"].get<double>(),
                e["compute_seconds"].get<double>() + e["transfer_seconds"].get<double>() +
                    e["gradient_sync_seconds"].get<double>(),
                1e-9 * e["iteration_seconds"].get<double>())
        << of;
    EXPECT_LT(e["recompute_seconds"].get<double>(), e["compute_seconds"].get<double>()) << of;
  };
  expect_whole(j["estimate"], "plan");
  for (const char* b : {"sequential", "per_task", "task_greedy"}) {
    const auto& baseline = j["baselines"][b];
    expect_whole(baseline["estimate"], b);
    if (baseline["recompute"] == "none") {
      EXPECT_EQ(baseline["estimate"]["recompute_seconds"].get<double>(), 0) << b;
    } else {
      EXPECT_GT(baseline["estimate"]["recompute_seconds"].get<double>(), 0) << b;
    }
  }
}

// Ten CLIP tasks on 8 A800s fit neither without recomputation nor with selective recomputation alone: every
// arrangement recomputes fully the fewest sixteenths of each component's blocks that fit, the rest selectively.
// The saved schedule says so, fits, and is faster than full recomputation; one sixteenth fewer does not fit.
TEST_F(Cli, MultitaskRecomputesFullyTheFewestBlocksThatFit) {
  const std::string file = (dir_ / "partial.schedule.json").string();
  const Result r = run("multitask --tasks multitask-clip-10 --cluster a800:8 --json --schedule-of sequential "
                       "--save-schedule " + file);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto sequential = nlohmann::json::parse(r.out)["baselines"]["sequential"];
  ASSERT_EQ(sequential["recompute"], "partial");
  ASSERT_TRUE(sequential["fits"].get<bool>());
  const double share = sequential["recompute_full_share"].get<double>();
  ASSERT_GT(share, 0);
  ASSERT_LT(share, 1);
  std::ifstream in(file);
  const nlohmann::json saved = nlohmann::json::parse(in);
  // The schedule's modes as (mode, count) runs: per component, none (embedding), full, selective, none (the rest).
  std::vector<std::vector<int>> blocks;  // per component: full, selective
  std::string previous = "none";
  for (const auto& run_of : saved["recompute"]) {
    const std::string mode = run_of[0];
    const int count = run_of[1];
    if (mode == "none") {
      previous = mode;
      continue;
    }
    if (previous == "none") blocks.push_back({0, 0});
    EXPECT_FALSE(previous == "selective" && mode == "full") << "a block recomputed fully after selective ones";
    blocks.back()[mode == "full" ? 0 : 1] += count;
    previous = mode;
  }
  ASSERT_GE(blocks.size(), 6u);  // ImageBind's six towers
  for (const auto& b : blocks) EXPECT_EQ(b[0], static_cast<int>(std::ceil(share * (b[0] + b[1]) - 1e-9)));

  // The same schedule with `share` of each tower's blocks recomputed fully as `full_share` says.
  const auto with_share = [&](double full_share, const std::string& name) {
    nlohmann::json edited = saved;
    nlohmann::json runs = nlohmann::json::array();
    size_t component = 0;
    std::string before = "none";
    for (const auto& run_of : saved["recompute"]) {
      const std::string mode = run_of[0];
      if (mode == "none") {
        runs.push_back(run_of);
      } else if (before == "none") {
        const int n = blocks[component][0] + blocks[component][1];
        const int full = static_cast<int>(std::ceil(full_share * n - 1e-9));
        if (full > 0) runs.push_back({"full", full});
        if (n - full > 0) runs.push_back({"selective", n - full});
        ++component;
      }
      before = mode;
    }
    edited["recompute"] = runs;
    const fs::path path = dir_ / name;
    std::ofstream(path) << edited.dump();
    const Result loaded = run("multitask --tasks multitask-clip-10 --cluster a800:8 --json --load-schedule " +
                              path.string());
    EXPECT_EQ(loaded.status, 0) << loaded.err;
    return nlohmann::json::parse(loaded.out);
  };
  const auto same = with_share(share, "same.json");
  EXPECT_TRUE(same["fits"].get<bool>());
  EXPECT_DOUBLE_EQ(same["iteration_seconds"].get<double>(), sequential["iteration_seconds"].get<double>());
  EXPECT_FALSE(with_share(share - 1.0 / 16, "fewer.json")["fits"].get<bool>());
  const auto full = with_share(1.0, "full.json");
  EXPECT_TRUE(full["fits"].get<bool>());
  EXPECT_GT(full["iteration_seconds"].get<double>(), 1.1 * sequential["iteration_seconds"].get<double>());
}

// A task that runs one component in two nodes, on other inputs: every arrangement's saved schedule loads again and
// simulates to the iteration the plan gave it.
TEST_F(Cli, MultitaskLoadsWhatItSavesForATaskRunningAComponentTwice) {
  const std::string tasks = write("two_views.json", R"({"fulcrum": 1, "kind": "tasks", "name": "views",
    "model": {"fulcrum": 1, "name": "m", "components": [
      {"name": "vision", "role": "encoder", "layers": [{"kind": "transformer", "repeat": 4, "hidden": 256, "ffn": 1024,
       "heads": 4}]},
      {"name": "llm", "role": "llm", "layers": [{"kind": "transformer", "repeat": 4, "hidden": 256, "ffn": 1024,
       "heads": 4}]}]},
    "tasks": [{"name": "pair", "batch": 64, "nodes": [
      {"name": "small", "component": "vision", "tokens": 65}, {"name": "big", "component": "vision", "tokens": 257},
      {"name": "text", "component": "llm", "tokens": 128, "inputs": ["small", "big"]}]}]})");
  for (const char* arrangement : {"plan", "sequential", "per-task", "task-greedy"}) {
    const std::string saved = (dir_ / fmt::format("{}.json", arrangement)).string();
    const Result planned = run(fmt::format("multitask --tasks {} --cluster a800:8 --json --schedule-of {} "
                                           "--save-schedule {}", tasks, arrangement, saved));
    ASSERT_EQ(planned.status, 0) << arrangement << ": " << planned.err;
    const Result loaded = run(fmt::format("multitask --tasks {} --cluster a800:8 --json --load-schedule {}", tasks,
                                          saved));
    ASSERT_EQ(loaded.status, 0) << arrangement << ": " << loaded.err;
    EXPECT_GT(nlohmann::json::parse(loaded.out)["iteration_seconds"].get<double>(), 0) << arrangement;
  }
}

TEST_F(Cli, MultitaskBadInput) {
  // Schedules to load: multitask ones for 8 and 16 devices, and a pipeline's.
  const std::string saved = (dir_ / "saved.json").string(), saved16 = (dir_ / "saved16.json").string(),
                    pipeline = (dir_ / "pipeline.json").string();
  ASSERT_EQ(run("multitask --tasks multitask-clip-4 --cluster a800:8 --save-schedule " + saved).status, 0);
  ASSERT_EQ(run("multitask --tasks multitask-clip-4 --cluster a800:16 --save-schedule " + saved16).status, 0);
  ASSERT_EQ(run("simulate --model gpt-11b --cluster a100:16 --gbs 64 --tp 2 --pp 2 --quiet --save-schedule " +
                pipeline).status, 0);
  // The saved one without its gradient sync: well formed, but its shared layers' copies would train apart.
  const std::string unsynced = (dir_ / "unsynced.json").string();
  {
    nlohmann::json doc = nlohmann::json::parse(slurp(saved));
    doc["tasks"]["sync_groups"] = nlohmann::json::array();
    for (auto& program : doc["programs"]) {
      nlohmann::json kept = nlohmann::json::array();
      for (const auto& in : program) {
        if (in[0] != "collective") kept.push_back(in);
      }
      program = kept;
    }
    std::ofstream(unsynced) << doc.dump();
  }
  // The saved one with its first slice given to a task that does not exist, or on other sequences than its task's:
  // well formed, but not the work of these tasks.
  auto edited = [&](const std::string& name, size_t field, int64_t value) {
    nlohmann::json doc = nlohmann::json::parse(slurp(saved));
    doc["tasks"]["slices"][0][field] = value;
    const std::string file = (dir_ / name).string();
    std::ofstream(file) << doc.dump();
    return file;
  };
  const std::string no_task = edited("no_task.json", 0, 99), other_tokens = edited("other_tokens.json", 5, 3);
  auto graph = [&](const std::string& name, const std::string& task) {
    const fs::path file = dir_ / name;
    std::ofstream(file) << R"({"fulcrum": 1, "kind": "tasks", "name": "bad", "model": "vit-3b", "tasks": [)" << task
                        << "]}";
    return file.string();
  };
  const std::pair<std::string, std::string> cases[] = {
      {"--tasks " + graph("cycle.json", R"({"name": "t", "batch": 8, "nodes": [{"name": "a", "component": "vit-3b",
         "tokens": 257, "inputs": ["b"]}, {"name": "b", "component": "vit-3b", "tokens": 257, "inputs": ["a"]}]})"),
       "cycle.json: tasks[0] ('t'): node 'a' is on a cycle of inputs"},
      {"--tasks " + graph("unknown.json", R"({"name": "t", "batch": 8, "nodes": [{"name": "a", "component": "vit",
         "tokens": 257}]})"),
       "unknown.json: tasks[0] ('t').nodes[0]: component 'vit' is not one of model 'vit-3b'"},
      {"--tasks " + graph("indivisible.json", R"({"name": "t", "batch": 10, "micro_batches": 4, "nodes": [{"name": "a",
         "component": "vit-3b", "tokens": 257}]})"),
       "indivisible.json: tasks[0] ('t'): batch 10 is not divisible into 4 micro-batches"},
      {"--tasks " + graph("input_twice.json", R"({"name": "t", "batch": 8, "nodes": [{"name": "a", "component":
         "vit-3b", "tokens": 257}, {"name": "b", "component": "vit-3b", "tokens": 257, "inputs": ["a", "a"]}]})"),
       "input_twice.json: tasks[0] ('t').nodes[1].inputs: 'a' is named twice"},
      {"--tasks " + graph("too_long.json", R"({"name": "t", "batch": 524288, "nodes": [{"name": "a", "component":
         "vit-3b", "tokens": 4194304}]})"),
       "too_long.json: tasks[0] ('t').nodes[0]: 524288 sequences of 4194304 tokens a micro-batch is too large"},
      {"--tasks clip-99", "neither a preset"},
      {"--tasks multitask-clip-4 --load-schedule " + saved16, "saved16.json: the schedule has programs for 16 devices "
                                                               "but the cluster 'a800:8' has 8"},
      {"--tasks qwen-val --load-schedule " + saved, "saved.json: the schedule covers"},
      {"--tasks multitask-clip-4 --load-schedule " + pipeline, "pipeline.json: not a multitask schedule"},
      {"--tasks multitask-clip-4 --load-schedule " + unsynced, "unsynced.json: layer "},
      {"--tasks multitask-clip-4 --load-schedule " + no_task, "no_task.json: slice 0 runs task 99, but"},
      {"--tasks multitask-clip-4 --load-schedule " + other_tokens, "in 1 micro-batch of 256 sequences of 3 tokens, which task"},
      {"--tasks multitask-clip-4 --load-schedule " + saved + " --save-schedule x.json", "--load-schedule times"},
      // The schedule keeps its own optimizer state and sync groups: these would be ignored.
      {"--tasks multitask-clip-4 --load-schedule " + saved + " --zero 0", "--zero and --bucket-mb plan one"},
      {"--tasks multitask-clip-4 --load-schedule " + saved + " --bucket-mb 25", "--zero and --bucket-mb plan one"},
      {"--tasks multitask-clip-4 --zero 2", "--zero 2: a multitask plan all-reduces gradients in full"},
      {"--tasks multitask-clip-4 --bucket-mb -1", "--bucket-mb -1: expected MiB from 0"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = run("multitask " + args + " --cluster a800:8 --json");
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << args;
  }
}

TEST_F(Cli, PlanBadInput) {
  const std::pair<std::string, std::string> cases[] = {
      {"--model gpt-11b --cluster a100:16 --gbs 64 --strategy fastest", "unknown strategy 'fastest'"},
      {"--model gpt-11b --cluster a100:16 --gbs 64 --strategy megatron --baseline-config 2,2,2", "expected DP,TP,PP,VPP,MBS"},
      {"--model gpt-11b --cluster a100:16 --gbs 64 --strategy megatron --baseline-config 2,2,2,1,x",
       "as positive integers"},
      {"--model gpt-175b --cluster a100:8 --gbs 8 --no-baselines", "fits in memory"},
      {"--model gpt-11b --cluster a100:3 --gbs 7 --no-baselines", "no parallel configuration of 3 devices"},
      {"--model gpt-11b --cluster a100:16 --gbs 64 --no-baselines --export nemo", "--export nemo"},
      {"--model internvl-chat-1.5 --cluster a100:64 --gbs 256 --no-baselines --export megatron --strategy balanced "
       "--baseline-config 4,1,16,1,1",
       "holds only encoder layers"},
      {"--model gpt-11b --cluster a100:16 --gbs 64 --config 2,2,2", "--config '2,2,2': expected DP,TP,PP,VPP,MBS"},
      {"--model gpt-11b --cluster a100:16 --gbs 64 --config 2,2,2,1,1",
       "--config DP 2 × TP 2 × PP 2 is not the cluster's 16 devices"},
      {"--model gpt-11b --cluster a100:16 --gbs 64 --strategy zero3 --config 16,1,1,1,1", "takes no configuration"},
      {"--model gpt-11b --cluster a100:16 --gbs 64 --dtype fp8", "a100 has none"},
      {"--model vit-3b+gpt-11b --cluster h100:8 --gbs 16 --strategy optimus --baseline-config 1,2,4,1,2 "
       "--export megatron",
       "--strategy optimus: Megatron-LM and DeepSpeed cannot express its encoder plan"},
      {"--model vit-3b+gpt-11b --cluster h100:8 --gbs 16 --encoders bubbles --export megatron",
       "--encoders bubbles: --export needs one pipeline over the whole model"},
      {"--model vit-3b+gpt-11b --cluster h100:8 --gbs 16 --encoders stages --strategy omnibal",
       "--encoders stages: only --strategy fulcrum chooses where the encoders run"},
      {"--model vit-3b+gpt-11b --cluster h100:8 --gbs 16 --encoders middle", "unknown encoder placement 'middle'"},
      {"--model gpt-11b --cluster a100:16 --gbs 64 --no-baselines --encoders bubbles",
       "model 'gpt-11b' has no encoder"},
  };
  const std::string out = (dir_ / "plan.json").string();
  for (const auto& [args, message] : cases) {
    const Result r = run("plan " + args + " --quiet --out " + out);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
    EXPECT_FALSE(fs::exists(out)) << args;
  }
}

// What a profiler of real CPU runs hands to simulate, plan and batch: a small LLM, a CPU machine calibrated by
// measurement (the cpu preset, 2 devices sharing their cores with communication, with measured rates), and
// profiles of the LLM block's forward at 512 tokens.
const char* kTinyModel = R"({"fulcrum": 1, "name": "tiny-lm", "components": [{"name": "llm", "role": "llm", "layers": [
  {"kind": "token_embedding", "hidden": 256, "vocab": 32000},
  {"kind": "transformer", "repeat": 4, "hidden": 256, "ffn": 1024, "heads": 4},
  {"kind": "final_norm", "hidden": 256},
  {"kind": "lm_head", "hidden": 256, "vocab": 32000}]}]})";
const char* kCpuCluster = R"({"fulcrum": 1, "preset": "cpu:2", "device": {"bf16_flops_per_second": 1e11,
  "memory_bytes_per_second": 2e10, "intra_node_bytes_per_second": 4e9}})";

std::string block_forward_profile(const char* dtype, double seconds) {
  return fmt::format(R"({{"fulcrum_profile": 1, "device": "cpu", "entries": [
    {{"layer": "transformer", "hidden": 256, "ffn": 1024, "heads": 4, "kv_heads": 4, "head_dim": 64,
      "mlp": "gelu", "dtype": "{}", "pass": "forward", "tokens": [512], "seconds": [{}]}}]}})",
                     dtype, seconds);
}

// Data parallelism over the 2 devices (pp 1), 2 micro-batches of one 512-token sequence per replica. A micro-batch
// of exactly the profiled length takes the measured forward exactly, and on one pipeline stage the iteration is
// the compute stream's work plus the gradient reduction and optimizer step (communication shares the cores), so
// measuring the block forward at 2 s instead of 1 s adds micro-batches × blocks × 1 s = 2 × 4 × 1 s. A profile
// measured in fp32 prices nothing of a bf16 run (the iteration is the analytic one, and a warning says so), and
// prices the same run with --dtype fp32.
TEST_F(Cli, SimulateTakesMeasuredLayerTimesFromAProfile) {
  const std::string model = write("tiny.json", kTinyModel), cluster = write("cpu.json", kCpuCluster);
  const std::string base = fmt::format("simulate --model {} --cluster {} --gbs 4 --mbs 1 --seq 512 --json", model,
                                       cluster);
  const auto iteration = [&](const std::string& extra, int applied = -1) {
    const Result r = run(base + extra);
    EXPECT_EQ(r.status, 0) << extra << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["plan"]["dp"], 2);
    EXPECT_EQ(j["plan"]["micro_batches"], 2);
    if (applied >= 0) {
      EXPECT_EQ(j["profile"]["entries_applied"], applied) << extra;
    }
    return j["iteration_seconds"].get<double>();
  };
  const std::string one = write("one.json", block_forward_profile("bf16", 1.0));
  const std::string two = write("two.json", block_forward_profile("bf16", 2.0));
  const std::string fp32 = write("fp32.json", block_forward_profile("fp32", 2.0));
  const double analytic = iteration("");
  const double measured_one = iteration(" --profile " + one, 1);
  const double measured_two = iteration(" --profile " + two, 1);
  // 8 block forwards on each device now take 1 s each, which the analytic model puts at a few tens of ms.
  EXPECT_GT(measured_one, analytic + 7);
  EXPECT_LT(measured_one, analytic + 8);
  EXPECT_NEAR(measured_two - measured_one, 2 * 4 * 1.0, 1e-6);
  EXPECT_EQ(iteration(" --profile " + fp32, 0), analytic);
  const Result warned = run(base + " --profile " + fp32);
  EXPECT_EQ(std::count(warned.err.begin(), warned.err.end(), '\n'), 1) << warned.err;
  EXPECT_NE(warned.err.find("fp32.json: none of its 1 entries matches"), std::string::npos) << warned.err;
  EXPECT_NE(warned.err.find("dtype bf16"), std::string::npos) << warned.err;
  EXPECT_GT(iteration(" --dtype fp32 --profile " + fp32, 1), iteration(" --dtype fp32") + 8);
}

// plan reads a cluster file as simulate does; --config pins Fulcrum's own plan to exactly DP 1 TP 1 PP 2 (the
// search alone picks TP 2 here), its schedule still chosen between 1F1B and ZB-H1; the profile prices it.
TEST_F(Cli, PlanPinsItsConfigurationOnACalibratedCpuCluster) {
  const std::string model = write("tiny.json", kTinyModel), cluster = write("cpu.json", kCpuCluster);
  const std::string profile = write("one.json", block_forward_profile("bf16", 1.0));
  const std::string out = (dir_ / "plan.json").string();
  const std::string base = fmt::format("plan --model {} --cluster {} --gbs 4 --seq 512 --quiet --strategy fulcrum",
                                       model, cluster);
  const Result searched = run(base + " --no-baselines");
  ASSERT_EQ(searched.status, 0) << searched.err;
  EXPECT_NE(searched.out.find("tiny-lm on 2 × cpu, global batch 4"), std::string::npos) << searched.out;
  EXPECT_NE(searched.out.find("DP 1 TP 2 PP 1"), std::string::npos) << searched.out;

  const Result pinned = run(base + " --config 1,1,2,1,1 --json --out " + out);
  ASSERT_EQ(pinned.status, 0) << pinned.err;
  const auto j = nlohmann::json::parse(pinned.out);
  EXPECT_EQ(j["plan"]["dp"], 1);
  EXPECT_EQ(j["plan"]["tp"], 1);
  EXPECT_EQ(j["plan"]["pp"], 2);
  EXPECT_EQ(j["plan"]["vpp"], 1);
  EXPECT_EQ(j["plan"]["mbs"], 1);
  EXPECT_EQ(j["plan"]["batcher"], "fulcrum");
  EXPECT_EQ(j["plan"]["stages"].size(), 2u);
  EXPECT_EQ(j["candidates"], 2);  // 1F1B and ZB-H1
  EXPECT_EQ(j["dtype"], "bf16");
  // The baselines keep their own search.
  EXPECT_TRUE(j["baselines"].contains("megatron"));
  EXPECT_NE(j["baselines"]["megatron"]["plan"]["tp"], 1);
  const auto file = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(file["plan"]["pp"], 2);
  EXPECT_EQ(file["dtype"], "bf16");

  const Result profiled = run(base + " --config 1,1,2,1,1 --no-baselines --json --profile " + profile);
  ASSERT_EQ(profiled.status, 0) << profiled.err;
  const auto p = nlohmann::json::parse(profiled.out);
  EXPECT_EQ(p["profile"]["entries_applied"], 1);
  EXPECT_EQ(p["plan"]["pp"], 2);
  // 4 micro-batches, each through 2 blocks of 1 s measured forward on every stage (modelled at a few tens of
  // ms): at least 7 s more.
  EXPECT_GT(p["predicted"]["iteration_seconds"].get<double>(), j["predicted"]["iteration_seconds"].get<double>() + 7);
}

// batch --model balances with the model's cost on the given devices; a profile makes it the measured cost. The
// block forward measured at 1 s per 512 tokens, some 40 times the model's, raises every step's predicted time
// (by less than 40 times: the backward passes, the embedding and the head keep their modelled times).
TEST_F(Cli, BatchBalancesWithAProfiledModelCost) {
  const std::string model = write("tiny.json", kTinyModel), cluster = write("cpu.json", kCpuCluster);
  const std::string profile = write("one.json", block_forward_profile("bf16", 1.0));
  const std::string base = fmt::format("batch --data data/vision/ai2d_train_12k_wh_token_lengths.json --dp 2 --json "
                                       "--model {} --cluster {}", model, cluster);
  const Result analytic = run(base);
  const Result measured = run(base + " --profile " + profile);
  ASSERT_EQ(analytic.status, 0) << analytic.err;
  ASSERT_EQ(measured.status, 0) << measured.err;
  const auto a = nlohmann::json::parse(analytic.out), m = nlohmann::json::parse(measured.out);
  EXPECT_EQ(m["params"]["dtype"], "bf16");
  EXPECT_EQ(m["params"]["profile"]["entries_applied"], 1);
  EXPECT_FALSE(a["params"].contains("profile"));
  EXPECT_GT(m["metrics"]["predicted_step_seconds_sum"].get<double>(),
            2 * a["metrics"]["predicted_step_seconds_sum"].get<double>());
  EXPECT_EQ(m["duplicated"], 0);
}

TEST_F(Cli, StatsOfTheBundledIndex) {
  const Result r = run("stats --data data/internvl_sft_1.2M.json --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["samples"], 60495);
  EXPECT_EQ(j["missing_sources"].size(), 6u);
  EXPECT_EQ(j["vision"]["max"], 5);
  EXPECT_EQ(j["tokens"]["max"], 1832);  // chartqa's longest record (reference/omnibal.md §3.8)
}

}  // namespace
