// The device's names: each reads back, an unknown one is refused by every command that takes
// --device (at parse time, with the one message), and the default follows the GPUs found.
#include "anvil/env/device.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/env/toolchain.h"
#include "anvil/util/fs.h"
#include "anvil/util/subprocess.h"

namespace anvil {
namespace {

TEST(Device, EachNameReadsBackAndNoOtherIsOne) {
  for (Device d : {Device::Cuda, Device::Cpu}) EXPECT_EQ(device_named(to_string(d)), d);
  EXPECT_STREQ(to_string(Device::Cuda), "cuda");
  EXPECT_STREQ(to_string(Device::Cpu), "cpu");
  EXPECT_STREQ(to_string(std::optional<Device>()), "");
  for (const char* name : {"", "tpu", "CUDA", "gpu", "cuda:0"}) EXPECT_FALSE(device_named(name)) << name;
  EXPECT_EQ(unknown_device("tpu"), "unknown device 'tpu' (use cuda or cpu)");
}

TEST(Device, TheNamesAreTheResultSchemas) {
  auto text = read_file(std::string(ANVIL_SOURCE_DIR) + "/schemas/anvil.eval-1.schema.json");
  ASSERT_TRUE(text);
  auto names = nlohmann::json::parse(*text)["properties"]["candidate"]["properties"]["device"]["enum"];
  ASSERT_TRUE(names.is_array());
  EXPECT_EQ(names, nlohmann::json({to_string(Device::Cuda), to_string(Device::Cpu)}));
}

TEST(Device, TheDefaultIsCudaWhereAGpuIsFound) {
  Environment env;
  EXPECT_EQ(default_device(env), Device::Cpu);
  EXPECT_EQ(device_or_default(Device::Cuda, env), Device::Cuda);
  env.gpus.push_back(Gpu{});
  EXPECT_EQ(default_device(env), Device::Cuda);
  EXPECT_EQ(device_or_default(std::nullopt, env), Device::Cuda);
  EXPECT_EQ(device_or_default(Device::Cpu, env), Device::Cpu);
}

TEST(Device, EveryCommandRefusesAnUnknownDeviceBeforeItStarts) {
  const std::vector<std::vector<std::string>> commands = {
      {"eval", "--task", "t.py", "--candidate", "c"}, {"vet", "t.py"},           {"baselines", "t.py"},
      {"task", "profile", "t.py"},                    {"bench", "--tasks", "t"}, {"serve"},
      {"agent", "--tasks", "t"}};
  for (auto argv : commands) {
    argv.insert(argv.begin(), ANVIL_BINARY);
    argv.insert(argv.end(), {"--device", "tpu"});
    SubprocessResult r = run_subprocess(argv);
    EXPECT_EQ(r.exit_code, 2) << argv[1] << ": " << r.output;
    EXPECT_NE(r.output.find("unknown device 'tpu' (use cuda or cpu)"), std::string::npos) << argv[1] << ": " << r.output;
  }
}

}  // namespace
}  // namespace anvil
