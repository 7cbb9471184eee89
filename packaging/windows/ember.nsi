; Ember's Windows installer (NSIS 3, Unicode). Per-user: no administrator rights needed.
;
;   makensis -DVERSION=0.1.0 -DPAYLOAD=dist\ember -DICON=build\icons\ember.ico ^
;            -DOUTFILE=dist\Ember-0.1.0-setup.exe packaging\windows\ember.nsi
;
; PAYLOAD is the PyInstaller onedir folder: Ember.exe (the window, no console), ember-cli.exe
; (its console twin for `ember-cli serve`, `ember-cli run ...`) and _internal\.
; Upgrades replace the program folder; the user's models, conversations and settings live in
; %LOCALAPPDATA%\ember (platformdirs), which neither an upgrade nor the uninstaller touches.
Unicode true
!include "MUI2.nsh"

!ifndef VERSION
  !error "pass -DVERSION=x.y.z"
!endif
!ifndef PAYLOAD
  !error "pass -DPAYLOAD=<the onedir bundle folder>"
!endif
!ifndef OUTFILE
  !define OUTFILE "Ember-${VERSION}-setup.exe"
!endif
!define APPNAME "Ember"
!define UNINSTALL_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\Ember"

Name "${APPNAME} ${VERSION}"
OutFile "${OUTFILE}"
InstallDir "$LOCALAPPDATA\Programs\Ember"
InstallDirRegKey HKCU "${UNINSTALL_KEY}" "InstallLocation"
RequestExecutionLevel user
SetCompressor /SOLID lzma
VIProductVersion "${VERSION}.0"
VIAddVersionKey "ProductName" "${APPNAME}"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "FileDescription" "${APPNAME} installer"
VIAddVersionKey "LegalCopyright" "Apache-2.0"

!ifdef ICON
  !define MUI_ICON "${ICON}"
  !define MUI_UNICON "${ICON}"
!endif
!define MUI_FINISHPAGE_RUN "$INSTDIR\Ember.exe"
!define MUI_FINISHPAGE_RUN_TEXT "Start Ember"

!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

Section "Ember" SecMain
  SectionIn RO
  ; an upgrade: files of the old version must not linger beside the new ones
  RMDir /r "$INSTDIR\_internal"
  SetOutPath "$INSTDIR"
  File /r "${PAYLOAD}\*.*"
  WriteUninstaller "$INSTDIR\Uninstall.exe"
  CreateDirectory "$SMPROGRAMS\Ember"
  CreateShortcut "$SMPROGRAMS\Ember\Ember.lnk" "$INSTDIR\Ember.exe"
  CreateShortcut "$DESKTOP\Ember.lnk" "$INSTDIR\Ember.exe"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayName" "${APPNAME}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "Publisher" "Ember developers"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayIcon" "$INSTDIR\Ember.exe"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "UninstallString" '"$INSTDIR\Uninstall.exe"'
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoRepair" 1
SectionEnd

Section "Uninstall"
  ; the program only: models, history and settings in %LOCALAPPDATA%\ember stay
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\Ember.exe"
  Delete "$INSTDIR\ember-cli.exe"
  Delete "$INSTDIR\Uninstall.exe"
  RMDir "$INSTDIR"
  Delete "$SMPROGRAMS\Ember\Ember.lnk"
  RMDir "$SMPROGRAMS\Ember"
  Delete "$DESKTOP\Ember.lnk"
  DeleteRegKey HKCU "${UNINSTALL_KEY}"
SectionEnd
