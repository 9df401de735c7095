/* msSanitizer's detectors on one file of its packets, for benchmarks/side_by_side.py (issue 29).
 *
 *   mssanitizer_driver FILE CHECKS
 *
 * FILE holds packets as msSanitizer's hooks send them on the wire of the source tree it is built from: [u32
 * PacketType][payload], read by msSanitizer's own MemCheckProtocol. CHECKS is a comma-separated list of memcheck,
 * initcheck, racecheck (as `mssanitizer --tool=...`: initcheck runs inside memcheck's sanitizer).
 *
 * Each packet is handled as the tool process's command loop handles it (csrc/core/framework/command.cpp: the
 * DEVICE_SUMMARY, KERNEL_SUMMARY, SANITIZER_RECORD and KERNEL_RECORD cases, whose handlers live in an anonymous
 * namespace there and are repeated below without the socket replies, the cross-NPU record copy and the SIMT part).
 * The Checker is msSanitizer's (one worker thread per tool, as in the tool). Timed: from the first packet handled to
 * the last kernel's KERNEL_FINISH consumed by every tool, in CPU time of the whole process (every thread),
 * CLOCK_PROCESS_CPUTIME_ID; the file's reading and the packet framing before it are not timed.
 *
 * Prints one JSON line: records (kernel records walked + host records), kernels, cpu_s, wall_s, walk_cpu_s (the
 * main thread's CPU in KernelBlock's walk), producer_cpu_s (the main thread's CPU: the walk, RecordPreProcess and
 * the hand-over to the tools' threads; cpu_s less this is the detectors' threads), findings (reports the detectors
 * emitted: "====== ERROR"/"====== WARNING" headers) and the sizes of the wire structs it was built with.
 */
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/framework/checker.h"
#include "core/framework/config.h"
#include "core/framework/device_manager.h"
#include "core/framework/kernel_block.h"
#include "core/framework/kernel_manager.h"
#include "core/framework/protocol.h"
#include "core/framework/record_defs.h"
#include "core/framework/runtime_context.h"

using namespace Sanitizer;

namespace {

double CpuSeconds()
{
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double ThreadCpuSeconds()
{
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double WallSeconds()
{
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

uint64_t g_records = 0;
uint64_t g_kernels = 0;
double g_walk = 0.0;  // this thread's CPU in KernelBlock's walk (records out of the slot's bytes)

// command.cpp's HandleDeviceInfo
void OnDeviceSummary(Checker &checker, DeviceInfoSummary const &summary)
{
    DeviceManager::Instance().Set(summary.deviceId, summary);
    RuntimeContext::Instance().deviceSummary_ = summary;
    checker.SetDeviceInfo(summary);
}

// command.cpp's HandleKernelInfo (the kernel name shown as sent: no demangling)
void OnKernelSummary(Checker &checker, KernelSummary const &kernelSummary)
{
    RuntimeContext::Instance().kernelIdx_++;
    RuntimeContext::Instance().currentBlockIdx_ = 0;
    RuntimeContext::Instance().kernelSummary_ = kernelSummary;
    RuntimeContext::Instance().kernelNameDisplay = std::string(kernelSummary.kernelName);
    KernelManager::Instance().Add(RuntimeContext::Instance().GetDeviceId(), kernelSummary);
    checker.SetKernelInfo(kernelSummary);
}

// command.cpp's HandleKernelBlock, less the cross-NPU copy, the SIMT records and the reply to the hooks
void OnKernelRecord(Checker &checker, Packet::BinaryPayload const &payload)
{
    RuntimeContext &runtimeContext = RuntimeContext::Instance();
    auto memInfo = static_cast<uint8_t const *>(static_cast<void const *>(payload.buf));
    auto kernelBlock = KernelBlock::CreateKernelBlock(memInfo, payload.len, runtimeContext.currentBlockIdx_);
    if (kernelBlock == nullptr) {
        std::cerr << "driver: slot " << runtimeContext.currentBlockIdx_ << " refused by CreateKernelBlock"
                  << std::endl;
        ++runtimeContext.currentBlockIdx_;
        return;
    }
    SanitizerRecord sanitizerRecord;
    std::vector<SanitizerRecord> records;
    records.reserve(kernelBlock->GetRecordNum());
    sanitizerRecord.version = RecordVersion::KERNEL_RECORD;
    double walk0 = ThreadCpuSeconds();
    while (kernelBlock->NextSimd(sanitizerRecord.payload.kernelRecord)) {
        records.emplace_back(sanitizerRecord);
    }
    g_walk += ThreadCpuSeconds() - walk0;
    g_records += records.size();
    sanitizerRecord.payload.kernelRecord.recordType = RecordType::BLOCK_FINISH;
    sanitizerRecord.payload.kernelRecord.serialNo = ++runtimeContext.serialNo_;
    records.emplace_back(sanitizerRecord);
    ++runtimeContext.currentBlockIdx_;
    if (runtimeContext.currentBlockIdx_ == kernelBlock->GetTotalBlockDim()) {
        sanitizerRecord.payload.kernelRecord.recordType = RecordType::KERNEL_FINISH;
        sanitizerRecord.payload.kernelRecord.serialNo = ++runtimeContext.serialNo_;
        records.emplace_back(sanitizerRecord);
        ++g_kernels;
    }
    checker.Do(records);
}

uint64_t CountOf(std::string const &text, char const *needle)
{
    uint64_t n = 0;
    for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
        ++n;
    }
    return n;
}

}  // namespace

int main(int argc, char **argv)
{
    if (argc != 3) {
        std::cerr << "usage: " << argv[0] << " FILE memcheck[,initcheck][,racecheck]" << std::endl;
        return 2;
    }
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) {
        std::cerr << "driver: cannot read " << argv[1] << std::endl;
        return 2;
    }
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string checks = std::string(",") + argv[2] + ",";

    Config config{};
    config.checkBlockId = -1;
    config.cacheSize = 100;
    config.memCheck = checks.find(",memcheck,") != std::string::npos;
    config.initCheck = checks.find(",initcheck,") != std::string::npos;
    config.raceCheck = checks.find(",racecheck,") != std::string::npos;
    config.defaultCheck = config.memCheck || config.initCheck;  // as cli_parser.cpp sets it for either tool

    MemCheckProtocol protocol;
    protocol.Feed(data);
    std::vector<Packet> packets;
    for (;;) {
        Packet packet = protocol.GetPacket();
        if (packet.GetType() == PacketType::INVALID) {
            break;
        }
        packets.emplace_back(std::move(packet));
    }

    std::ostringstream reports;
    double cpu = 0.0;
    double wall = 0.0;
    double producer = 0.0;
    {
        Checker checker(config, false);
        checker.SetDetectionInfo(LogLv::INFO, reports);
        double cpu0 = CpuSeconds();
        double wall0 = WallSeconds();
        double producer0 = ThreadCpuSeconds();
        for (auto const &packet : packets) {
            switch (packet.GetType()) {
                case PacketType::DEVICE_SUMMARY:
                    OnDeviceSummary(checker, packet.GetPayload().deviceSummary);
                    break;
                case PacketType::KERNEL_SUMMARY:
                    OnKernelSummary(checker, packet.GetPayload().kernelSummary);
                    break;
                case PacketType::SANITIZER_RECORD:
                    ++g_records;
                    checker.Do(packet.GetPayload().sanitizerRecord);
                    break;
                case PacketType::KERNEL_RECORD:
                    OnKernelRecord(checker, packet.GetPayload().binary);
                    break;
                default:
                    std::cerr << "driver: packet type " << static_cast<uint32_t>(packet.GetType()) << " skipped"
                              << std::endl;
            }
        }
        cpu = CpuSeconds() - cpu0;
        wall = WallSeconds() - wall0;
        producer = ThreadCpuSeconds() - producer0;
        checker.Finish();  // stops the workers; leak reports (none: leakCheck is off) are not timed
    }
    std::string text = reports.str();
    uint64_t findings = CountOf(text, "====== ERROR") + CountOf(text, "====== WARNING");
    if (std::getenv("DRIVER_REPORTS") != nullptr) {
        std::cerr << text;
    }
    std::printf("{\"records\": %llu, \"kernels\": %llu, \"packets\": %zu, \"cpu_s\": %.6f, \"wall_s\": %.6f, "
                "\"walk_cpu_s\": %.6f, \"producer_cpu_s\": %.6f, "
                "\"findings\": %llu, \"checks\": \"%s\", \"sizeof\": {\"RecordGlobalHead\": %zu, "
                "\"RecordBlockHead\": %zu, \"SanitizerRecord\": %zu, \"KernelSummary\": %zu, "
                "\"DeviceInfoSummary\": %zu}}\n",
                static_cast<unsigned long long>(g_records), static_cast<unsigned long long>(g_kernels),
                packets.size(), cpu, wall, g_walk, producer, static_cast<unsigned long long>(findings), argv[2],
                sizeof(RecordGlobalHead), sizeof(RecordBlockHead), sizeof(SanitizerRecord), sizeof(KernelSummary),
                sizeof(DeviceInfoSummary));
    return 0;
}
