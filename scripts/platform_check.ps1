# scripts/platform_check.sh for Windows without Git Bash: the same steps, bounded, from PowerShell.
#
#   powershell -ExecutionPolicy Bypass -File scripts\platform_check.ps1
#   $env:PYTHON = "py"; $env:TORCH = "torch==2.13.0"   # the interpreter; torch ("" skips it and the smoke test)
#
# A fresh venv in a temporary folder, envdoctor installed from this checkout (and torch from the package
# index), then: the static check, the spawn guard on fixtures\platforms\project (train.py must be SPW001,
# ok.py not), the full check with the DataLoader smoke test, the JSON report's platform facts, the raw CIM
# query envdoctor parses, and a block to paste into an issue. Exit 0 when every step gave what it should.
$ErrorActionPreference = "Continue"
Set-Location (Join-Path $PSScriptRoot "..")
$Python = if ($env:PYTHON) { $env:PYTHON } else { "python" }
$Torch = if ($null -ne $env:TORCH) { $env:TORCH } else { "torch==2.13.0" }
$StepTimeout = if ($env:STEP_TIMEOUT) { [int]$env:STEP_TIMEOUT } else { 600 }
$Work = Join-Path ([System.IO.Path]::GetTempPath()) ("envdoctor-" + [guid]::NewGuid().ToString("N").Substring(0, 8))
New-Item -ItemType Directory -Path $Work | Out-Null
$Summary = New-Object System.Collections.Generic.List[string]
$Failed = 0
$env:NO_COLOR = "1"

function Section($Name) { Write-Output "`n=== $Name ===" }
function Bounded([string]$Exe, [string[]]$Arguments) {
    # Start-Process with a time limit; the process tree is ended when it overstays.
    $quoted = $Arguments | ForEach-Object { if ($_ -match '[\s"]') { '"' + ($_ -replace '"', '\"') + '"' } else { $_ } }
    $proc = Start-Process -FilePath $Exe -ArgumentList $quoted -NoNewWindow -PassThru
    if (-not $proc.WaitForExit($StepTimeout * 1000)) {
        & taskkill /T /F /PID $proc.Id | Out-Null
        Write-Output "timed out after $StepTimeout s"
        return 124
    }
    return $proc.ExitCode
}
function Expect([string]$Name, [int[]]$Allowed, [string]$Exe, [string[]]$Arguments) {
    $rc = Bounded $Exe $Arguments
    if ($Allowed -contains $rc) { $Summary.Add("ok    $Name (exit $rc)") }
    else { $Summary.Add("FAIL  $Name (exit $rc, expected one of: $($Allowed -join ' '))"); $script:Failed = 1 }
}

Section "machine"
& $Python -c "import platform, sys; print(platform.platform(), platform.machine(), 'Python', sys.version.split()[0])"

Section "fresh venv and install ($Work\venv)"
Bounded $Python @("-m", "venv", "$Work\venv") | Out-Null
$Vpy = "$Work\venv\Scripts\python.exe"
Bounded $Vpy @("-m", "pip", "install", "--quiet", "--upgrade", "pip") | Out-Null
$install = @("-m", "pip", "install", "--quiet", ".")
if ($Torch) { $install += $Torch }
Expect "pip install envdoctor $Torch" @(0) $Vpy $install

Section "static check: envdoctor check --no-loader"
Expect "static check" @(0, 1) $Vpy @("-m", "envdoctor", "check", "--no-loader")

Section "spawn guard: fixtures\platforms\project (train.py is SPW001, ok.py is not)"
$spawnRc = Bounded $Vpy @("-m", "envdoctor", "check", "--no-loader", "--select", "SPW001", "--format", "json",
    "--output", "$Work\spawn.json", "fixtures\platforms\project\train.py", "fixtures\platforms\project\ok.py")
$report = Get-Content "$Work\spawn.json" -Raw | ConvertFrom-Json
$flagged = @($report.findings | ForEach-Object { "$($_.rule) $($_.severity) $(Split-Path $_.location.path -Leaf)" })
$flagged | ForEach-Object { Write-Output $_ }
if ($spawnRc -eq 1 -and $flagged.Count -eq 1 -and $flagged[0] -eq "SPW001 error train.py") {
    $Summary.Add("ok    spawn guard (SPW001, an error, on train.py only)")
} else { $Summary.Add("FAIL  spawn guard (exit $spawnRc; see above)"); $Failed = 1 }

if ($Torch) {
    Section "full check with the DataLoader smoke test (spawn workers)"
    Expect "check with smoke test" @(0, 1) $Vpy @("-m", "envdoctor", "check", "--budget", "20")
} else { $Summary.Add("skip  smoke test (TORCH is empty)") }

Section "platform facts (envdoctor report --json --no-loader)"
Bounded $Vpy @("-m", "envdoctor", "report", "--json", "--no-loader", "--output", "$Work\report.json") | Out-Null
$facts = (Get-Content "$Work\report.json" -Raw | ConvertFrom-Json).facts
Write-Output ("not applicable: " + ($facts.system.not_applicable | ConvertTo-Json -Compress))
Write-Output ("cpu: " + ($facts.system.cpu | ConvertTo-Json -Compress))
Write-Output ("memory: " + ($facts.system.memory | ConvertTo-Json -Compress))
Write-Output ("storage mount: " + ($facts.storage.mount | ConvertTo-Json -Compress -Depth 4))

Section "the CIM query envdoctor runs (compare with fixtures\platforms\windows\cim.json)"
$query = & $Vpy -c "from envdoctor.facts.windows import CIM_QUERY; print(CIM_QUERY)"
powershell -NoProfile -NonInteractive -Command $query

Section "paste this into the issue"
Write-Output '```'
& $Python -c "import platform, sys; print(platform.platform(), platform.machine(), 'Python', sys.version.split()[0])"
Write-Output "envdoctor $(git rev-parse --short HEAD 2>$null), torch: $Torch"
$Summary | ForEach-Object { Write-Output $_ }
Write-Output '```'
if (-not $env:KEEP_VENV) { Remove-Item -Recurse -Force $Work -ErrorAction SilentlyContinue }
exit $Failed
